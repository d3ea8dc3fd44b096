# Fuzzing: cargo-fuzz (libFuzzer) targets in fuzz/, a member of the main workspace.
#   make fuzz                      every target for FUZZ_SECONDS each, corpora grow in fuzz/corpus/
#   make fuzz FUZZ_TARGETS=http_head FUZZ_SECONDS=1200
#   make fuzz-cmin                 minimise the corpora before committing them
# `make test` replays the committed corpora on stable Rust (in test-rust's `cargo test
# --workspace`; `make fuzz-replay` alone): each target's body is a plain function in
# fuzz/src, called by fuzz/tests/replay.rs.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= http_head resolve_target range_conditions trace_csv trace_clf trace_wc98 session_toml load_schedule gatekeeper_classify gatekeeper_config gatekeeper_response gatekeeper_request tls_names h2_request
# Pinned: a new cargo-fuzz must not change what `make fuzz` does by itself.
CARGO_FUZZ_VERSION := 0.13.1
FUZZ_TOOLCHAIN ?= nightly
# The fuzz builds skip the release profile's link-time optimisation: with the sanitiser's
# instrumentation it makes each target's link take minutes and finds nothing more.
FUZZ_CARGO := CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 $(CARGO) +$(FUZZ_TOOLCHAIN)

.PHONY: fuzz fuzz-tools fuzz-cmin fuzz-replay

fuzz-tools: ## install the nightly toolchain and the pinned cargo-fuzz if missing
	@command -v rustup >/dev/null || { echo "make fuzz: rustup is needed for the nightly toolchain" >&2; exit 1; }
	@rustup toolchain list | grep -q '^$(FUZZ_TOOLCHAIN)' || rustup toolchain install $(FUZZ_TOOLCHAIN) --profile minimal
	@cargo fuzz --version 2>/dev/null | grep -q ' $(CARGO_FUZZ_VERSION)$$' || \
	  $(CARGO) install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked

# Each target runs alone (one process, -jobs=1 would only add a log file) for
# FUZZ_SECONDS; a crash stops `make fuzz` with the input under fuzz/artifacts/.
fuzz: fuzz-tools ## run every fuzz target for FUZZ_SECONDS (FUZZ_TARGETS to choose)
	for t in $(FUZZ_TARGETS); do \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $(FUZZ_CARGO) fuzz run --fuzz-dir fuzz --features libfuzzer $$t fuzz/corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1; \
	done

fuzz-cmin: fuzz-tools ## minimise the fuzz corpora before committing them
	for t in $(FUZZ_TARGETS); do $(FUZZ_CARGO) fuzz cmin --fuzz-dir fuzz --features libfuzzer $$t fuzz/corpus/$$t; done

# Stable Rust, no libFuzzer: every committed input through every target's body.
fuzz-replay: ## replay the committed fuzz corpora and regressions through every target (stable Rust)
	$(CARGO) test --locked -p shortfirst-fuzz
