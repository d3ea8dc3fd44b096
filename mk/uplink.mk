# uplink: the HTB band tree (`shortfirst uplink`) and the namespace testbed.
#
# make demo-downloads   8 x 1 MB downloads and one 20 KB response through a
#                       10 Mbit HTB uplink in network namespaces, under fair
#                       then srpt; prints the 20 KB response time per policy,
#                       the ratio and the bytes per band. Needs root. ~1 min.
#                       Result JSON and server logs: results/demo-downloads/.
#
# The uplink crate's unit tests run in `cargo test --workspace`; the testbed
# and namespace tests (lab/tests/test_testbed.py, test_namespace_srpt.py) in
# the lab's pytest run, both part of `make test`.

APT_PACKAGES += iproute2 ethtool procps

DEMO_DOWNLOADS_TRIALS ?= 3

.PHONY: demo-downloads
demo-downloads: apt venv build ## one 20 KB response during eight 1 MB downloads, fair vs srpt (root, ~1 min)
	@if [ "$$(id -u)" != 0 ]; then echo "make demo-downloads: needs root (network namespaces, tc)" >&2; exit 1; fi
	cd lab && ../$(PY) -m shortfirst_lab downloads --bin ../$(BIN) --trials $(DEMO_DOWNLOADS_TRIALS) \
	  --out ../results/demo-downloads/result.json
