# netem: the user-space WAN emulator (`shortfirst netem`, crates/netem).
#
# The crate's unit and property tests run in `cargo test --workspace`; the
# validation against independent physics (connect-time RTT, UDP loss within a
# binomial interval, reno throughput vs Mathis, no hidden drops) is
# lab/tests/test_netem_validation.py, in the lab's pytest run. Both are part
# of `make test`; the namespace tests need root and skip otherwise.
#
# make bench-netem   packets/s and CPU per packet through the emulator at 10
#                    and 100 Mbit/s -> results/bench-netem.json. Needs root.
#                    ~1 min; holds /run/shortfirst-bench.lock.

APT_PACKAGES += iproute2 ethtool procps util-linux
BENCH_TARGETS += bench-netem

NETEM_BENCH_SECONDS ?= 20
NETEM_BENCH_ARGS ?=

.PHONY: bench-netem
bench-netem: apt venv build ## packets/s and CPU per packet through shortfirst netem at 10 and 100 Mbit (root)
	@if [ "$$(id -u)" != 0 ]; then echo "make bench-netem: needs root (network namespaces, TUN)" >&2; exit 1; fi
	cd lab && flock /run/shortfirst-bench.lock ../$(PY) -m shortfirst_lab bench netem --bin ../$(BIN) \
	  --seconds $(NETEM_BENCH_SECONDS) --out ../results/bench-netem.json $(NETEM_BENCH_ARGS)
