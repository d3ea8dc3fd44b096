# shortfirst serve: benchmark against nginx (bench/serve.py drives both with wrk).
# nginx is also the reference of the differential conformance test
# (crates/server/tests/conformance.rs, run by `make test`; it skips, saying
# so, where nginx is missing).
APT_PACKAGES += nginx wrk curl
# The HTTPS and HTTP/2 half of the bench: h2load (nghttp2-client) drives serve, nginx and
# h2o over TLS, HTTP/1.1 and HTTP/2. Installed by the bench only: `make test` does not need them.
BENCH_SERVE_PACKAGES := nghttp2-client h2o openssl
# testssl.sh audits the HTTPS listener (crates/server/tests/testssl.rs).
APT_PACKAGES += testssl.sh
BENCH_TARGETS += bench-serve

.PHONY: bench-serve
# Needs root: nginx runs its workers as root to read the temporary directory,
# and shortfirst sets SO_PRIORITY above 6. It builds the HTTP/2 floor the TLS half measures
# beside the servers (the h2 crate and rustls alone) where bench serve's --floor-bin looks.
bench-serve: apt venv $(BIN) ## shortfirst serve (kernel bands: srpt and srrt; --scheduler user) against nginx, driven by wrk (root)
	@$(MAKE) --no-print-directory apt APT_PACKAGES="$(BENCH_SERVE_PACKAGES)"
	$(CARGO) build --release --locked -p shortfirst-server --example h2_floor
	$(PY) -m shortfirst_lab bench serve --bin $(BIN) --out results/bench-serve.json

# h2spec, the HTTP/2 conformance suite (RFC 7540, RFC 7541), from the Go module proxy:
# crates/server/tests/h2spec.rs runs it against the server in h2c and over TLS. Its last
# release has no go.mod, so the version pins h2spec and Go picks its few dependencies.
# Without Go the target says so and the test skips, saying so too.
H2SPEC_VERSION := v2.2.1+incompatible
H2SPEC := $(STAMPS)/bin/h2spec
TEST_TARGETS += h2spec

.PHONY: h2spec
h2spec: ## install the pinned h2spec (HTTP/2 conformance) into .make/bin
	@if [ -x $(H2SPEC) ]; then exit 0; fi; \
	if ! command -v go >/dev/null; then echo "make h2spec: go not found; the HTTP/2 conformance test will skip" >&2; exit 0; fi; \
	mkdir -p $(STAMPS)/bin; \
	echo "installing h2spec $(H2SPEC_VERSION)"; \
	GOTOOLCHAIN=local GOBIN=$(CURDIR)/$(STAMPS)/bin go install github.com/summerwind/h2spec/cmd/h2spec@$(H2SPEC_VERSION)
