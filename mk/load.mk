# shortfirst load / workload: benchmark of the load generator against
# shortfirst serve, beside wrk (crates/load/bench/bench_load.py).
APT_PACKAGES += wrk
BENCH_TARGETS += bench-load

# Extra options, e.g. LOAD_BENCH_ARGS="--halt-poll-ns 200000" (opt-in: the same search
# again with the VM's guest halt polling on, reported side by side; see the script).
LOAD_BENCH_ARGS ?=

.PHONY: bench-load
bench-load: apt venv $(BIN) ## highest rate the load generator sustains, beside wrk (LOAD_BENCH_ARGS)
	$(PY) -m shortfirst_lab bench load --bin $(BIN) --out results/bench-load.json $(LOAD_BENCH_ARGS)

# Bounded memory: a 1 M-request trace at 2,000 requests/s (~9 minutes).
.PHONY: bench-load-memory
bench-load-memory: apt venv $(BIN) ## peak memory of the load generator on a 1 M-request trace (~9 min)
	$(PY) -m shortfirst_lab bench load --bin $(BIN) --memory --out results/bench-load-memory.json
