# shortfirst serve: benchmark against nginx (bench/serve.py drives both with wrk).
# nginx is also the reference of the differential conformance test
# (crates/server/tests/conformance.rs, run by `make test`; it skips, saying
# so, where nginx is missing).
APT_PACKAGES += nginx wrk curl
BENCH_TARGETS += bench-serve

.PHONY: bench-serve
# Needs root: nginx runs its workers as root to read the temporary directory,
# and shortfirst sets SO_PRIORITY above 6.
bench-serve: apt venv $(BIN) ## shortfirst serve (kernel bands: srpt and srrt; --scheduler user) against nginx, driven by wrk (root)
	$(PY) -m shortfirst_lab bench serve --bin $(BIN) --out results/bench-serve.json
