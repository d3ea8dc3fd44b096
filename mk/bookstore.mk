# mk/bookstore.mk — the TPC-W bookstore example (examples/bookstore).
#
#   make bookstore-db        private PostgreSQL in .make/pg + a generated database
#   make bookstore-serve     serve the shop on $(BOOKSTORE_LISTEN)
#   make bookstore-costs     per-interaction no-load cost vs the paper's Table 1
#                            (results/bookstore-costs.json)
#   make bookstore-pg-stop   stop the private PostgreSQL (rm -rf .make/pg removes it)
#
# The integration tests (cargo test) start and remove their own PostgreSQL;
# they only need the Debian package, which `make apt` installs; the gatekeeper's
# chain test in front of PgBouncer needs `pgbouncer` too.

APT_PACKAGES += postgresql pgbouncer
# The lab's end-to-end TPC-W test (lab/tests/test_tpcw.py) runs the bookstore beside the
# lab's shortfirst binary (`make lab-bins` builds both).

BOOKSTORE_BIN := target/release/bookstore
BOOKSTORE_PGDIR ?= $(STAMPS)/pg
BOOKSTORE_PORT ?= 54329
BOOKSTORE_DB ?= postgres://bookstore@127.0.0.1:$(BOOKSTORE_PORT)/bookstore
# The paper's scale: 10,000 items, 288,000 customers (about 400 MB in PostgreSQL).
BOOKSTORE_ITEMS ?= 10000
BOOKSTORE_CUSTOMERS ?= 288000
BOOKSTORE_SEED ?= 1
BOOKSTORE_LISTEN ?= 127.0.0.1:8080
BOOKSTORE_POOL ?= 128

.PHONY: bookstore-build bookstore-pg-start bookstore-pg-stop bookstore-db bookstore-serve bookstore-costs

bookstore-build: $(BOOKSTORE_BIN) ## release build of the TPC-W bookstore (target/release/bookstore)
$(BOOKSTORE_BIN): Cargo.lock $(shell find examples/bookstore -name '*.rs' -o -name Cargo.toml -o -name '*.csv' 2>/dev/null)
	$(CARGO) build --release --locked $(RELEASE_BINS)
	@touch $@

bookstore-pg-start: apt ## start the private PostgreSQL in .make/pg
	@examples/bookstore/pg.sh start $(BOOKSTORE_PGDIR) --port $(BOOKSTORE_PORT) >/dev/null
	@examples/bookstore/pg.sh status $(BOOKSTORE_PGDIR)

bookstore-pg-stop: ## stop the private PostgreSQL (rm -rf .make/pg removes it)
	examples/bookstore/pg.sh stop $(BOOKSTORE_PGDIR)

# Regenerated only when the scale or seed changes (the stamp, kept inside the
# PostgreSQL directory so it disappears with it, records them).
BOOKSTORE_STAMP = $(BOOKSTORE_PGDIR)/bookstore-db-$(BOOKSTORE_ITEMS)-$(BOOKSTORE_CUSTOMERS)-$(BOOKSTORE_SEED)-$(BOOKSTORE_PORT)
bookstore-db: bookstore-pg-start $(BOOKSTORE_BIN) ## generate the bookstore database (BOOKSTORE_ITEMS, BOOKSTORE_CUSTOMERS)
	@if [ ! -f $(BOOKSTORE_STAMP) ]; then \
	  rm -f $(BOOKSTORE_PGDIR)/bookstore-db-*; \
	  $(BOOKSTORE_BIN) gen --db $(BOOKSTORE_DB) --items $(BOOKSTORE_ITEMS) --customers $(BOOKSTORE_CUSTOMERS) --seed $(BOOKSTORE_SEED) \
	    && touch $(BOOKSTORE_STAMP); \
	else echo "bookstore database up to date ($(BOOKSTORE_ITEMS) items, $(BOOKSTORE_CUSTOMERS) customers)"; fi

bookstore-serve: bookstore-db ## serve the bookstore on BOOKSTORE_LISTEN (default 127.0.0.1:8080)
	$(BOOKSTORE_BIN) serve --db $(BOOKSTORE_DB) --listen $(BOOKSTORE_LISTEN) --pool $(BOOKSTORE_POOL)

bookstore-costs: bookstore-db ## no-load cost per interaction vs the Gatekeeper paper's Table 1
	@mkdir -p results
	$(BOOKSTORE_BIN) costs --db $(BOOKSTORE_DB) --json results/bookstore-costs.json
