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
# Every release binary in one cargo call: their shared dependencies build once, with one
# set of features (two calls, each with its own package, built many of them twice).
RELEASE_BINS := --bin shortfirst --bin bookstore
# The cargo profile of the binaries the lab's tests run: dev, the build `cargo test` has
# already made (the lab's tests check behaviour, not speed: a second, release build of every
# dependency would add about ten minutes to a fresh clone's `make test`), or release
# (`make build`, already there after `make demo`). The tests find them through $$SHORTFIRST_BIN.
LAB_PROFILE ?= dev
$(if $(filter-out release dev,$(LAB_PROFILE)),$(error LAB_PROFILE must be release or dev, not '$(LAB_PROFILE)'))
LAB_BIN := target/$(if $(filter dev,$(LAB_PROFILE)),debug,release)/shortfirst
STAMPS := .make

APT_PACKAGES := iproute2 ethtool procps
TEST_TARGETS :=
BENCH_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: help setup apt build lab-bins venv test test-rust test-lab test-lab-quick test-lab-slow lint fmt bench clean

help: ## list every target with one line each (this list)
	@echo "make TARGET — every target, from its '## ' comment in Makefile and mk/*.mk:"
	@awk -F':.*## ' '/^[a-zA-Z0-9_.-]+:([^=]|$$).*## / { printf "  %-28s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup: apt build venv ## install everything: Debian packages, the release build, the Python venv

# Debian packages: install only what is missing, apt-get update once if needed.
apt: ## install the Debian packages the targets need (APT_PACKAGES; root)
	@missing=""; for p in $(sort $(APT_PACKAGES)); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make: need root to install:$$missing" >&2; exit 1; fi; \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: $(BIN) ## release build of target/release/shortfirst
$(BIN): Cargo.lock $(shell find crates -name '*.rs' -o -name Cargo.toml 2>/dev/null)
	@command -v $(CARGO) >/dev/null || { echo "make: cargo not found (Rust via rustup is part of this machine kind)" >&2; exit 1; }
	$(CARGO) build --release --locked $(RELEASE_BINS)
	@touch $@

lab-bins: $(if $(filter dev,$(LAB_PROFILE)),,build bookstore-build) ## the binaries the lab's tests run, of cargo profile LAB_PROFILE
	$(if $(filter dev,$(LAB_PROFILE)),$(CARGO) build --locked $(RELEASE_BINS))

venv: $(STAMPS)/venv ## the lab's Python virtual environment (.venv) from lab/requirements.lock
$(STAMPS)/venv: lab/requirements.lock lab/pyproject.toml
	@mkdir -p $(STAMPS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q pip==26.3   # pinned: a new pip must not change CI by itself
	$(VENV)/bin/pip install -q --require-hashes -r lab/requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e lab
	@touch $@

test: lint $(TEST_TARGETS) test-rust test-lab ## every test: lint, Rust, Python, real sockets, namespaces and qdiscs
	@echo "make test: all passed"

test-rust: apt ## cargo test of the whole workspace
	$(if $(wildcard $(H2SPEC)),H2SPEC=$(CURDIR)/$(H2SPEC)) $(CARGO) test --workspace --locked

# The lab's tests in two parts: the quick ones (seconds each, no root), then those marked
# `slow` or `root` (real namespaces, qdiscs, PostgreSQL, browsers; each skips with a message
# where it cannot run). Both print their slowest tests, so a test that grows shows up in CI.
test-lab: test-lab-quick test-lab-slow ## the lab's pytest suite (builds LAB_PROFILE's binaries; root for namespaces)

# The quick tests run in LAB_TEST_WORKERS processes (pytest-xdist): one per core here.
LAB_TEST_WORKERS ?= 2
test-lab-quick: venv apt lab-bins ## the lab's tests not marked slow or root (a few minutes)
	cd lab && SHORTFIRST_BIN=$(CURDIR)/$(LAB_BIN) ../$(PY) -m pytest -q -ra -m "not slow and not root" -n $(LAB_TEST_WORKERS) --durations=10

test-lab-slow: venv apt lab-bins ## the lab's tests marked slow or root (namespaces, qdiscs, real services)
	cd lab && SHORTFIRST_BIN=$(CURDIR)/$(LAB_BIN) ../$(PY) -m pytest -q -ra -m "slow or root" --durations=15

# Every Python file we ship: the lab, the bench drivers and scripts/ (one ruff configuration, lab's).
# Run from lab/ so that lab's own packages are first-party for import sorting.
PY_SOURCES := . ../bench ../crates/load/bench ../scripts

lint: venv ## rustfmt, clippy -D warnings, ruff and the history check, all as checks
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(PY) scripts/unused_deps.py
	cd lab && ../$(VENV)/bin/ruff check --config pyproject.toml $(PY_SOURCES)
	cd lab && ../$(VENV)/bin/ruff format --config pyproject.toml --check $(PY_SOURCES)
	cd lab && ../$(PY) -m shortfirst_lab depcheck --pyproject pyproject.toml --lock requirements.lock $(PY_SOURCES)
	$(PYTHON) scripts/check_history.py

fmt: venv ## format Rust and Python in place, apply ruff's fixes
	$(CARGO) fmt --all
	cd lab && ../$(VENV)/bin/ruff format --config pyproject.toml $(PY_SOURCES)
	cd lab && ../$(VENV)/bin/ruff check --config pyproject.toml --fix $(PY_SOURCES)

bench: $(BENCH_TARGETS) ## every benchmark (BENCH_TARGETS), each writes JSON under results/

clean: ## remove target/, .venv and .make
	rm -rf target $(VENV) $(STAMPS)
