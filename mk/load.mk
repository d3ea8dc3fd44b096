# shortfirst load / workload: benchmark of the load generator against
# shortfirst serve, beside wrk (crates/load/bench/bench_load.py).
APT_PACKAGES += wrk
BENCH_TARGETS += bench-load

.PHONY: bench-load
bench-load: apt $(BIN)
	$(PYTHON) crates/load/bench/bench_load.py --bin $(BIN) --out results/bench-load.json
