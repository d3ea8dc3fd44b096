"""The ways into the database a point is measured through: `direct` (the server itself),
`pgbouncer` (transaction pooling, `backends.pgbouncer`) or the gatekeeper (`run.gatekeeper`
with a `postgres://` upstream), each started fresh for the point and stopped after it; and
what the gatekeeper's /metrics says at the end of one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..backends.pgbouncer import pgbouncer
from ..run import Gate, gatekeeper
from ..timeline import prom

#: Seconds the gatekeeper gets, after its clients have gone, to report its admitted charge 0.
SETTLE_S = 5.0


@dataclass(frozen=True)
class Context:
    """What every point shares: our binary, the server's URL, where raw logs go, PgBouncer's
    pool size, the most clients a point has, the argv prefix that starts a proxy where
    the database runs (`run.pinned_prefix`: on the reserved CPU; empty: where the lab runs),
    the CPUs the database has to itself (the reservation's; () unpinned) and its postmaster's
    process id (the database's CPU time without a reservation)."""

    binary: Path
    server_url: str
    work: Path
    pool_size: int
    max_clients: int
    prefix: list[str] = field(default_factory=list)
    db_cpus: tuple[int, ...] = ()
    postmaster_pid: int | None = None


@dataclass(frozen=True)
class Way:
    """A started arm: the URL pgbench connects to, the proxy's process id and the
    gatekeeper's admin port (None for direct; the admin port only for the gatekeeper), and
    the process ids of the proxies behind it (PgBouncer behind the gatekeeper)."""

    url: str
    pid: int | None = None
    admin_port: int | None = None
    behind: tuple[int, ...] = ()

    @property
    def pids(self) -> tuple[int, ...]:
        """Every proxy process of the way: the one clients reach, then those behind it."""
        return ((self.pid,) if self.pid else ()) + self.behind


def on_port(url: str, port: int) -> str:
    """`url` (user, database) at 127.0.0.1:`port`."""
    u = urlsplit(url)
    user = f"{u.username}@" if u.username else ""
    return urlunsplit((u.scheme, f"{user}127.0.0.1:{port}", u.path, u.query, ""))


@contextmanager
def way_in(
    ctx: Context,
    arm: str,
    log: Path,
    capacity: str | None = None,
    estimate_basis: str | None = None,
    pooled: bool = False,
    patience: str = "off",
    max_wait_s: float | None = None,
    overdue_share: float | None = None,
    max_queue_wait_s: float | None = None,
) -> Iterator[Way]:
    """The arm started: `direct`, `pgbouncer`, or a gatekeeper policy (fifo, sjf,
    sjf-aging:X) with `capacity` (`auto`, or a duration such as `40ms`; None: the binary's
    default) and `estimate_basis` (None: the binary's default); `pooled`: the gatekeeper in
    front of PgBouncer (its log beside `log`, `pgbouncer.log`), as an operator who keeps
    pooling deploys it; `patience`: the gatekeeper's `--patience` (`off` for pgbench, which
    never gives up and ends a client at a refusal; the clients' timeout for load-pg);
    `max_wait_s` and `overdue_share`: the starvation bound, `max_queue_wait_s` the queue-wait
    bound (None: the binary's defaults)."""
    if arm == "direct":
        yield Way(ctx.server_url)
        return
    if arm == "pgbouncer":
        with pgbouncer(ctx.server_url, ctx.pool_size, ctx.max_clients + 10, log, ctx.prefix) as b:
            yield Way(b.url, b.pid)
        return
    with contextlib.ExitStack() as stack:
        upstream, behind = ctx.server_url, ()
        if pooled:
            b_log = log.with_name("pgbouncer.log")
            b = stack.enter_context(
                pgbouncer(ctx.server_url, ctx.pool_size, ctx.max_clients + 10, b_log, ctx.prefix)
            )
            upstream, behind = b.url, (b.pid,)
        g = stack.enter_context(
            pg_gatekeeper(
                ctx.binary,
                upstream,
                log,
                prefix=ctx.prefix,
                policy=arm,
                capacity=capacity,
                patience=patience,
                max_wait_s=max_wait_s,
                overdue_share=overdue_share,
                max_queue_wait_s=max_queue_wait_s,
                estimate_basis=estimate_basis,
            )
        )
        yield Way(g.url, g.pid, g.admin_port, behind)


@contextmanager
def pg_gatekeeper(binary: str | Path, server_url: str, log: Path, **flags: Any) -> Iterator[Gate]:
    """`shortfirst gatekeeper` in front of the PostgreSQL server of `server_url` (`flags`:
    keyword arguments of `run.gatekeeper`); its Gate's URL is `server_url`'s user and
    database on the gatekeeper's port."""
    u = urlsplit(server_url)
    with gatekeeper(binary, f"postgres://{u.hostname}:{u.port}", log, scheme="postgres", **flags) as g:
        yield Gate(on_port(server_url, urlsplit(g.url).port or 0), g.admin_port, g.pid)


def gate_state(admin_port: int) -> dict:
    """The gatekeeper after its clients have gone: admitted charge (waited for to reach 0, up
    to SETTLE_S), in flight, queue, transactions admitted and refused, the types it knows and
    their learned costs."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        m = prom(admin_port, timeout_s=5)
        if m.get("gatekeeper_load_seconds", 1.0) == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    pre = 'gatekeeper_type_estimated_cost_seconds{type="'
    costs = {k[len(pre) : -2]: 1e3 * v for k, v in m.items() if k.startswith(pre)}
    return {
        "admitted_charge_s": m.get("gatekeeper_load_seconds"),
        "in_flight": m.get("gatekeeper_in_flight"),
        "queue_length": m.get("gatekeeper_queue_length"),
        "capacity_s": m.get("gatekeeper_capacity_seconds"),
        "admitted": m.get("gatekeeper_admitted_total"),
        "rejected": sum(v for k, v in m.items() if k.startswith("gatekeeper_rejected_total")),
        "types": len(costs),
        "type_table_overflow": m.get("gatekeeper_type_table_overflow_total"),
        "estimated_cost_ms": dict(sorted(costs.items(), key=lambda kv: -kv[1])[:8]),
    }
