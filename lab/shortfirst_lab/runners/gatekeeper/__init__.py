"""The gatekeeper harness: the gatekeeper in front of a backend, load through it, figures and
verdicts from the logs.

- `backends/`: what serves behind the gate, each an implementation of `backends.base.Backend`
  (`serve` starts one): `synthetic`, `foreign` (datasette, json-server), `bookstore` (over
  `postgres`), and `pgbouncer` (PgBouncer in front of that PostgreSQL).
- `run`: the one runner: the gatekeeper in front (or `direct`), calibration, traces, the load
  generator; `summary` a run's figures from the generator's log; `timeline` the gate's and
  the backend's metrics sampled during a run.
- The experiments, one package each, each run on the above: `synthetic` (closed and open load
  at multiples of the peak, the proxy's overhead; `bench gatekeeper-synthetic`), `foreign`
  (the peak-relative runs on datasette and json-server; `bench gatekeeper-foreign`), `tpcw`
  (the emulated-browser sweep of the bookstore; the `tpcw` verb) and `pg` (pgbench against
  the PostgreSQL gatekeeper, direct connections and PgBouncer; `bench pg`).
"""
