# Backends the project did not write, from package registries, for the gatekeeper's
# foreign-backend benchmark (lab/experiments/gatekeeper-datasette.toml, gatekeeper-json-server.toml):
#
#   make foreign-backends          datasette (PyPI, SQLite) in its own venv and json-server
#                                  (npm) in .make/foreign, at the versions pinned in lab/foreign/
#   make bench-gatekeeper-foreign  calibrate, then direct, and fifo / sjf / sjf-aging:2 with each
#                                  patience rule, in front of each, open and closed load at about twice the peak; writes
#                                  results/gatekeeper-foreign/summary.json (~50 min; run it under
#                                  the bench lock; each backend is pinned to the reserved CPU when
#                                  a `python -m shortfirst_lab cpus` reservation exists)

# nodejs (with npm) is on the machine image; Debian's own npm package would conflict with it.
APT_PACKAGES += nodejs
BENCH_TARGETS += bench-gatekeeper-foreign
# lab/tests/test_gatekeeper_foreign.py starts each backend behind the gatekeeper.
TEST_TARGETS += foreign-backends

FOREIGN_DIR := $(STAMPS)/foreign
FOREIGN_ARGS ?=

.PHONY: foreign-backends bench-gatekeeper-foreign

foreign-backends: $(FOREIGN_DIR)/datasette.stamp $(FOREIGN_DIR)/node.stamp ## install the foreign backends (datasette, json-server; pinned in lab/foreign/)

$(FOREIGN_DIR)/datasette.stamp: lab/foreign/datasette.lock
	@mkdir -p $(FOREIGN_DIR)
	rm -rf $(FOREIGN_DIR)/datasette
	$(PYTHON) -m venv $(FOREIGN_DIR)/datasette
	$(FOREIGN_DIR)/datasette/bin/pip install -q --require-hashes --no-deps -r lab/foreign/datasette.lock
	@touch $@

# npm ci installs exactly package-lock.json; the copy keeps lab/foreign/ free of node_modules.
$(FOREIGN_DIR)/node.stamp: lab/foreign/package.json lab/foreign/package-lock.json | apt
	@mkdir -p $(FOREIGN_DIR)/node
	cp lab/foreign/package.json lab/foreign/package-lock.json $(FOREIGN_DIR)/node/
	cd $(FOREIGN_DIR)/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

bench-gatekeeper-foreign: build venv foreign-backends ## gatekeeper in front of datasette and json-server (FOREIGN_ARGS)
	$(PY) -m shortfirst_lab bench gatekeeper-foreign lab/experiments/gatekeeper-datasette.toml \
	  lab/experiments/gatekeeper-json-server.toml --bin $(BIN) \
	  --tools $(FOREIGN_DIR) --out results/gatekeeper-foreign $(FOREIGN_ARGS)
