# shortfirst sim: simulator benchmark (the simulator's tests run under `cargo test`
# and the lab's pytest, which calls the release binary).
.PHONY: bench-sim

BENCH_TARGETS += bench-sim

# Jobs per workload; every policy runs 3 times on each of two workloads.
BENCH_SIM_JOBS ?= 2000000

bench-sim:
	@mkdir -p results
	$(CARGO) run --release --locked -p shortfirst-sim --example bench_sim -- results/bench-sim.json $(BENCH_SIM_JOBS)
