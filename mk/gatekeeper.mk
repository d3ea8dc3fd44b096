# Gatekeeper (Elnikety et al. 2004): admission-control / SJF proxy benchmark.
#
# make bench-gatekeeper-synthetic
#   Synthetic TPC-W-like upstream (shortfirst gatekeeper synthetic-upstream), capacity
#   calibrated with `shortfirst gatekeeper calibrate`, load driven by `shortfirst load`
#   (closed and open models): direct vs fifo / sjf / sjf-aging:{1,2,5}, plus proxy
#   overhead at low load. Writes results/bench-gatekeeper-synthetic.json.
#   Settings in lab/experiments/gatekeeper-synthetic.toml; flags override them: GK_BENCH_ARGS
#   (e.g. "--duration 20 --scale 0.5"), see `python -m shortfirst_lab bench gatekeeper-synthetic --help`.

GK_BENCH_ARGS ?=
BENCH_TARGETS += bench-gatekeeper-synthetic

.PHONY: bench-gatekeeper-synthetic
bench-gatekeeper-synthetic: build venv ## gatekeeper vs direct on the synthetic backend (GK_BENCH_ARGS)
	@mkdir -p results
	$(PY) -m shortfirst_lab bench gatekeeper-synthetic lab/experiments/gatekeeper-synthetic.toml --bin $(BIN) \
	  --out results/bench-gatekeeper-synthetic.json $(GK_BENCH_ARGS)

# make bench-gatekeeper-overhead
#   Only the low-load proxy overhead (a few minutes): direct vs gatekeeper vs nginx in
#   alternating rounds. Writes results/bench-gatekeeper-overhead.json (same schema as the
#   full bench, other sections absent). Knobs: GK_OVERHEAD_ARGS, e.g.
#   "--overhead-rounds 30 --overhead-baseline-bin OLD/shortfirst --halt-poll-ns 200000".
GK_OVERHEAD_ARGS ?=

.PHONY: bench-gatekeeper-overhead
bench-gatekeeper-overhead: build venv ## only the gatekeeper's low-load overhead, a few minutes (GK_OVERHEAD_ARGS)
	@mkdir -p results
	$(PY) -m shortfirst_lab bench gatekeeper-synthetic lab/experiments/gatekeeper-synthetic.toml --bin $(BIN) --only-overhead \
	  --out results/bench-gatekeeper-overhead.json $(GK_OVERHEAD_ARGS)
