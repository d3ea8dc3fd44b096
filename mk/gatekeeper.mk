# Gatekeeper (issue 5): admission-control / SJF proxy benchmark.
#
# make bench-gatekeeper-synthetic
#   Synthetic TPC-W-like upstream (shortfirst gatekeeper synthetic-upstream), capacity
#   calibrated with `shortfirst gatekeeper calibrate`, load driven by `shortfirst load`
#   (closed and open models): direct vs fifo / sjf / sjf-aging:{1,2,5}, plus proxy
#   overhead at low load. Writes results/bench-gatekeeper-synthetic.json.
#   Knobs: GK_BENCH_ARGS (e.g. "--duration 20 --scale 0.5"), see --help of the script.

GK_BENCH_ARGS ?=
BENCH_TARGETS += bench-gatekeeper-synthetic

.PHONY: bench-gatekeeper-synthetic
bench-gatekeeper-synthetic: build venv
	@mkdir -p results
	$(PY) crates/gatekeeper/bench/bench_synthetic.py --bin $(BIN) \
	  --out results/bench-gatekeeper-synthetic.json $(GK_BENCH_ARGS)
