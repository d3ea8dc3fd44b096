# mk/pg.mk — the gatekeeper at the database tier beside direct connections and PgBouncer.
#
#   make bench-pg          both below (~75 minutes). Run them under the bench lock with one
#                          CPU reserved (python -m shortfirst_lab cpus reserve 1).
#   make bench-pg-pgbench  pgbench's overhead per protocol (direct, PgBouncer, the gatekeeper)
#                          and cheap transactions behind expensive ones at multiples of the
#                          database's capacity from shortfirst load-pg's clients, who give up
#                          at 5 s (direct, PgBouncer, gatekeeper fifo / sjf / sjf+bound /
#                          sjf-aging:2 / sjf@auto), as lab/experiments/pg-gatekeeper.toml
#                          says; writes results/pg-gatekeeper/summary.json (~40 minutes). The
#                          database and the proxies run on the reserved CPU, the clients on
#                          the others.
#                          PG_BENCH_ARGS: e.g. "--only overload --set overload.duration_s=20".
#   make bench-pg-tpcw     the TPC-W bookstore with the gatekeeper at the database tier beside
#                          the HTTP tier (lab/experiments/gatekeeper-tpcw-placement.toml), the
#                          whole stack on the reserved CPU; writes
#                          results/gatekeeper-tpcw/placement/ (~35 minutes, root).
#                          PG_TPCW_ARGS: the sweep's overrides, e.g. "--db-capacity 50ms".

# PostgreSQL 15 (the server and pgbench), its contrib modules, PgBouncer 1.18.
APT_PACKAGES += postgresql postgresql-contrib pgbouncer
BENCH_TARGETS += bench-pg

PG_BENCH_ARGS ?=
PG_TPCW_ARGS ?=

.PHONY: bench-pg bench-pg-pgbench bench-pg-tpcw
bench-pg: bench-pg-pgbench bench-pg-tpcw ## the gatekeeper at the database tier: pgbench and the TPC-W bookstore (reserved CPU)

bench-pg-tpcw: build bookstore-build venv apt ## TPC-W with the gatekeeper at the database tier beside the HTTP tier (PG_TPCW_ARGS)
	$(PY) -m shortfirst_lab cpus run -- nice -n -5 $(PY) -m shortfirst_lab tpcw sweep \
	  lab/experiments/gatekeeper-tpcw-placement.toml --out results/gatekeeper-tpcw/placement $(PG_TPCW_ARGS)

bench-pg-pgbench: build venv apt ## the PostgreSQL gatekeeper vs direct and PgBouncer under pgbench (PG_BENCH_ARGS)
	$(PY) -m shortfirst_lab bench pg lab/experiments/pg-gatekeeper.toml --bin $(BIN) \
	  --out results/pg-gatekeeper $(PG_BENCH_ARGS)
