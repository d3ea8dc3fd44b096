"""The PostgreSQL gatekeeper beside direct connections and PgBouncer, driven by pgbench
(`bench pg`, `make bench-pg`): `pgbench` (data, scripts, command line, logs), `arms` (the ways
in), `overhead` (added latency, proxy CPU and throughput per protocol), `overload` (cheap
transactions behind expensive ones, open loop at multiples of the measured capacity),
`verdict` (the targets beside the measured values) and `bench` (the command line).
"""
