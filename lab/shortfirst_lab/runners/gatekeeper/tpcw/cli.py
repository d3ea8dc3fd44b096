"""Gatekeeper on the TPC-W bookstore: emulated browsers → (gatekeeper) → bookstore → PostgreSQL.

Everything runs on loopback: a private PostgreSQL started by ``examples/bookstore/pg.sh`` (stopped and
deleted by its watchdog when this process exits), the ``bookstore`` application server, optionally
``shortfirst gatekeeper`` in front of it, and ``shortfirst load`` in the closed model walking the TPC-W
shopping mix (``examples/bookstore/tpcw-shopping.toml``) on persistent connections.

``run_point`` measures one (mode, browsers) point; ``sweep`` runs an experiment file
(``lab/experiments/gatekeeper-tpcw.toml``) and writes ``summary.json`` with, per (mode, browsers):
``throughput_per_min``, ``mean_response_s``, ``p99_response_s`` and per interaction ``mean_wait_s``,
``mean_exec_s`` and ``mean_response_s`` over the same successful requests (``join_requests``: the
browsers' log joined with the bookstore's request log; exec = the bookstore's handler time plus the
browser's read after its first byte, wait = the rest), with the gatekeeper's own per-type histograms alongside
(``gate_mean_wait_s``, ``gate_mean_exec_s``) and, under ``joined.given_up``, what became of the requests
whose browser gave up. Every gatekeeper point also samples the learned costs once a second
(``timeline.csv`` in the point's directory).

Usage::

    python -m shortfirst_lab tpcw sweep lab/experiments/gatekeeper-tpcw.toml --out results/gatekeeper-tpcw
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .config import Binaries
from .report import report
from .sweep import sweep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shortfirst_lab tpcw", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="run an experiment file and write summary.json")
    s.add_argument("config", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument(
        "--profile",
        help="binaries of target/PROFILE (default: $SHORTFIRST_BIN's directory, else release)",
    )
    s.add_argument("--capacity", help="override the gatekeeper capacity (calibrate, auto, or e.g. 500ms)")
    s.add_argument("--db-capacity", help="override the database tier's capacity (calibrate, auto, 200ms)")
    s.add_argument("--modes", type=lambda v: v.split(","), help="override the modes, comma-separated")
    s.add_argument("--browsers", type=lambda v: [int(x) for x in v.split(",")], help="override load points")
    s.add_argument("--think", help="override the think time (a load-generator distribution; const:0: none)")
    s.add_argument("--duration", type=float, help="override [load] duration_s")
    s.add_argument("--warmup", type=float, help="override [load] warmup_s")
    s.add_argument("--client-timeout", type=float, help="override [load] client_timeout_s")
    s.add_argument("--items", type=int, help="override [bookstore] items")
    s.add_argument("--customers", type=int, help="override [bookstore] customers")
    s.add_argument(
        "--best-sellers-repeat",
        type=int,
        help="override [bookstore] best_sellers_repeat (runs of Best Sellers' query per request; TPC-W: 1)",
    )
    s.add_argument("--memory-limit-mb", type=int, help="override [postgres] memory_limit_mb")
    s.add_argument("--shared-buffers", help="override [postgres] shared_buffers")
    s.add_argument("--work-mem", help="override [postgres] work_mem")
    s.add_argument("--read-iops-limit", type=int, help="override [postgres] read_iops_limit")
    s.add_argument(
        "--max-queue-wait",
        type=float,
        help="override [gatekeeper] max_queue_wait_s (seconds; 0: no limit)",
    )
    s.add_argument(
        "--calibrate-with",
        choices=["closed-loop", "browsers"],
        help="override [gatekeeper] calibrate_with",
    )
    r = sub.add_parser("report", help="figures and the learned-cost table from a summary.json")
    r.add_argument("summary", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "report":
        for p in report(a.summary):
            print(p)
        return 0
    # SIGTERM (the lead stopping a sweep, a CI timeout) unwinds like Ctrl-C, so every context
    # manager stops what it started: gatekeeper, bookstore, load generator, PostgreSQL and its groups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    overrides = {
        "capacity": a.capacity,
        "db_capacity": a.db_capacity,
        "modes": a.modes,
        "browsers": a.browsers,
        "think": a.think,
        "duration_s": a.duration,
        "warmup_s": a.warmup,
        "client_timeout_s": a.client_timeout,
        "max_queue_wait_s": a.max_queue_wait,
        "calibrate_with": a.calibrate_with,
        "items": a.items,
        "customers": a.customers,
        "best_sellers_repeat": a.best_sellers_repeat,
        "postgres": {
            "memory_limit_mb": a.memory_limit_mb,
            "shared_buffers": a.shared_buffers,
            "work_mem": a.work_mem,
            "read_iops_limit": a.read_iops_limit,
        },
    }
    sweep(a.config, a.out, Binaries.default(a.profile), overrides)
    report(a.out / "summary.json")
    return 0
