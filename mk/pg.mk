# mk/pg.mk — the gatekeeper at the database tier beside direct connections and PgBouncer.
#
#   make bench-pg   pgbench's overhead per protocol (direct, PgBouncer, the gatekeeper) and
#                   cheap transactions behind expensive ones at multiples of the database's
#                   capacity (direct, PgBouncer, gatekeeper fifo / sjf / sjf-aging:2), as
#                   lab/experiments/pg-gatekeeper.toml says; writes
#                   results/pg-gatekeeper/summary.json (~10 minutes). Run it under the bench
#                   lock with one CPU reserved (python -m shortfirst_lab cpus reserve 1): the
#                   database and the proxies then run there, pgbench on the other CPUs.
#                   PG_BENCH_ARGS: e.g. "--only overload --set overload.duration_s=20".

# PostgreSQL 15 (the server and pgbench), its contrib modules, PgBouncer 1.18.
APT_PACKAGES += postgresql postgresql-contrib pgbouncer
BENCH_TARGETS += bench-pg

PG_BENCH_ARGS ?=

.PHONY: bench-pg
bench-pg: build venv apt ## the PostgreSQL gatekeeper vs direct and PgBouncer under pgbench (PG_BENCH_ARGS)
	$(PY) -m shortfirst_lab bench pg lab/experiments/pg-gatekeeper.toml --bin $(BIN) \
	  --out results/pg-gatekeeper $(PG_BENCH_ARGS)
