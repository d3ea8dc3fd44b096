# shortfirst — top-level Makefile.
#
# Quick start on a fresh machine (as root): `make demo`, `make test`.
# Every target installs what it needs (Debian packages, the Python venv, the
# release build); nothing has to be installed by hand first.
#
# Each area keeps its own targets in mk/<area>.mk and adds to these lists:
#   APT_PACKAGES  Debian packages its targets need
#   TEST_TARGETS  targets `make test` runs
#   BENCH_TARGETS targets `make bench` runs
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

CARGO ?= cargo
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := target/release/shortfirst
STAMPS := .make

APT_PACKAGES := iproute2 ethtool procps
TEST_TARGETS :=
BENCH_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: help setup apt build venv test test-rust test-lab lint fmt bench clean

help:
	@echo "make demo    — the main job: FAIR vs SRPT on a shaped uplink, with a report"
	@echo "make test    — every test (installs what it needs)"
	@echo "make bench   — every benchmark, results as JSON under results/"
	@echo "make lint    — rustfmt, clippy and ruff, all as checks"

setup: apt build venv

# Debian packages: install only what is missing, apt-get update once if needed.
apt:
	@missing=""; for p in $(sort $(APT_PACKAGES)); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make: need root to install:$$missing" >&2; exit 1; fi; \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: $(BIN)
$(BIN): Cargo.lock $(shell find crates -name '*.rs' -o -name Cargo.toml 2>/dev/null)
	@command -v $(CARGO) >/dev/null || { echo "make: cargo not found (Rust via rustup is part of this machine kind)" >&2; exit 1; }
	$(CARGO) build --release --locked --bin shortfirst
	@touch $@

venv: $(STAMPS)/venv
$(STAMPS)/venv: lab/requirements.lock lab/pyproject.toml
	@mkdir -p $(STAMPS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q pip==26.3   # pinned: a new pip must not change CI by itself
	$(VENV)/bin/pip install -q --require-hashes -r lab/requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e lab
	@touch $@

test: lint $(TEST_TARGETS) test-rust test-lab
	@echo "make test: all passed"

test-rust: apt
	$(CARGO) test --workspace --locked

test-lab: venv apt build
	cd lab && ../$(PY) -m pytest -q -ra

# Every Python file we ship: the lab, and the bench drivers (one ruff configuration, lab's).
# Run from lab/ so that lab's own packages are first-party for import sorting.
PY_SOURCES := . ../bench ../crates/gatekeeper/bench ../crates/load/bench

lint: venv
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(PY) -m pytest -q -p no:cacheprovider tools/test_unused_deps.py && $(PY) tools/unused_deps.py
	cd lab && ../$(VENV)/bin/ruff check --config pyproject.toml $(PY_SOURCES)
	cd lab && ../$(VENV)/bin/ruff format --config pyproject.toml --check $(PY_SOURCES)
	cd lab && ../$(PY) -m shortfirst_lab.depcheck --pyproject pyproject.toml --lock requirements.lock $(PY_SOURCES)

fmt: venv
	$(CARGO) fmt --all
	cd lab && ../$(VENV)/bin/ruff format --config pyproject.toml $(PY_SOURCES)
	cd lab && ../$(VENV)/bin/ruff check --config pyproject.toml --fix $(PY_SOURCES)

bench: $(BENCH_TARGETS)

clean:
	rm -rf target $(VENV) $(STAMPS)
