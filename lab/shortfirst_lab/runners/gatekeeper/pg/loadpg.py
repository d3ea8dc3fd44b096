"""`shortfirst load-pg` (ours) as the overload experiment's client: the same scripts and the
same open-loop schedule as pgbench's `-R`, but a refused transaction is logged with its
SQLSTATE and the client goes on, and a transaction not done `timeout` after its scheduled
start is cancelled (or skipped, if still waiting for a connection), as users give up. So a
way in that sheds load (the gatekeeper's patience rule, a queue-wait bound) can be measured:
pgbench ends a client at its first error.

Its `transactions.csv` is read back into pgbench's rows (`pgbench.Row`), with the latency of
every transaction that did not complete without error set to infinity: refused, timed out,
skipped and dropped ones are offered and not served.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path

from ..backends.base import GatekeeperError
from . import pgbench

#: The same bound as pgbench's logs.
MAX_LOG_ROWS = pgbench.MAX_LOG_ROWS


def report(started: pgbench.Started, timeout_s: float, out: Path) -> tuple[pgbench.Report, dict]:
    """Waits for a started load-pg (killed past `timeout_s`): a pgbench-like report (its ok
    transactions per second as `tps`, the schedule's start as `started_epoch_s`) and its
    summary."""
    code, _ = pgbench.wait(started, timeout_s, "load-pg")
    summary = json.loads((out / "summary.json").read_text())
    ok = summary["outcomes"]["ok"]
    rep = pgbench.Report(
        tps=summary["ok_per_s"],
        transactions=ok,
        aborted_clients=0,
        exit_code=code,
        wall_s=time.monotonic() - started.t0,
        started_epoch_s=summary["started_epoch_s"],
    )
    return rep, summary


def read_log(out: Path) -> list[pgbench.Row]:
    """`out/transactions.csv` as rows: scheduled start, end, latency from the scheduled start
    (infinite unless the outcome is `ok`), lag (sent − scheduled; the whole wait for one
    never sent)."""
    path = out / "transactions.csv"
    rows: list[pgbench.Row] = []
    try:
        f = open(path, newline="")
    except OSError as e:
        raise GatekeeperError(f"no load-pg log: {e}") from None
    with f:
        for r in csv.DictReader(f):
            sched, done = float(r["scheduled_s"]), float(r["done_s"])
            start = float(r["start_s"]) if r["start_s"] else done
            lat = done - sched if r["outcome"] == "ok" else math.inf
            rows.append(pgbench.Row(sched, done, lat, start - sched))
            if len(rows) >= MAX_LOG_ROWS:
                raise GatekeeperError(f"{path}: more than {MAX_LOG_ROWS} logged transactions")
    return rows
