"""Experiment 1, cheap transactions behind expensive ones: a cheap script (a point lookup) and
an expensive one (an aggregate over a range of accounts) in two client processes, open loop,
at multiples of the database's capacity, through each arm. The clients (`generator`) are
`shortfirst load-pg` (`loadpg`: a refused or timed-out transaction is logged and the client
goes on, so a way in that sheds load can be measured; the gatekeeper is then told the
clients' timeout as its `--patience`) or pgbench (`-R`; its first error ends a client, so
the gatekeeper runs with `--patience off` and no refusal).

The capacity is measured in the run, direct, open loop (`capacity.measure`): the mix's rate
at which the database's CPU would be busy all the time. The gatekeeper's own capacity (arms
without `@auto`) is the charge of `pool_size` expensive transactions, plus `cheap_room` of
one: at their wall time with `pool_size` running at once, or with the `cpu` basis at their
processor time (the expensive script's open-loop cost). An arm `POLICY+BASIS` runs with that
cost basis instead of `overload.estimate_basis`.

Per class, over the transactions scheduled in the window [start + warm-up, start +
duration] (load-pg's schedule starts once its connections are open; pgbench's, connections
included, runs `-T` from its launch): served (completed without error, latency from the
scheduled start within the client timeout) over offered, latency quantiles, goodput (served
per second) and the schedule lag. load-pg logs every scheduled transaction, whatever became
of it; for pgbench, offered = the logged transactions scheduled in the window + the rate ×
the part of the window whose schedule pgbench never reached (a process's schedule is taken
in order, and pgbench lets the transactions under way finish at the end, so only that tail
is missing from the logs). In the quantiles a transaction not served for another reason
than lateness (refused, skipped, never started) counts as infinitely late.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path

from ....kit import process_running
from ....spec.pg import Overload, overload_arm
from ..timeline import TIMELINE_SERIES, Sampler, write_timeline
from . import capacity, clients, loadpg, pgbench
from .arms import Context, gate_state, way_in
from .clients import CLASSES
from .schedwait import SchedWindow

#: The gatekeeper's /metrics sampled this often while the load runs (`timeline.csv`).
SAMPLE_S = 0.5
#: Seconds before the end of pgbench's schedule where the window ends (pgbench's own start
#: after the launch, a few milliseconds, is inside it).
END_GUARD_S = 0.1


def write_scripts(work: Path, accounts: int, ol: Overload) -> dict[str, Path]:
    """The two scripts, written once into `work`."""
    text = {
        "cheap": pgbench.cheap_script(accounts),
        "expensive": pgbench.expensive_script(accounts, ol.expensive_rows),
    }
    out = {}
    for name in CLASSES:
        out[name] = work / f"{name}.sql"
        out[name].write_text(text[name])
    return out


def point(
    ctx: Context, ol: Overload, arm: str, load: float, cap: dict, scripts: dict[str, Path], seed: int
) -> dict:
    """One arm at one load: both clients at once, then each class's figures."""
    policy, auto, basis, bound, shed = overload_arm(arm)
    basis = basis or ol.estimate_basis
    capacity = "auto" if auto else f"{cap['gate_capacity_ms_by_basis'][basis]:.0f}ms"
    d = ctx.work / "overload" / f"{load:g}-{arm.replace(':', '_').replace('@', '_').replace('+', '_')}"
    d.mkdir(parents=True, exist_ok=True)
    total = load * cap["capacity_tps"]
    rates = {"cheap": (1 - ol.expensive_share) * total, "expensive": ol.expensive_share * total}
    gated = policy not in ("direct", "pgbouncer")
    ours = ol.generator == "load-pg"
    with way_in(
        ctx,
        policy,
        d / "proxy.log",
        capacity=capacity if gated else None,
        estimate_basis=basis if gated else None,
        # load-pg's clients give up at the timeout: the gatekeeper is told so, and refuses
        # what would not finish before it.
        patience=f"{ol.timeout_s:g}s" if ours else "off",
        max_wait_s=ol.max_wait_s if bound else None,
        overdue_share=ol.overdue_share if bound else None,
        max_queue_wait_s=ol.max_queue_wait_s if shed else None,
    ) as way:
        sampler = Sampler(None, way.admin_port, SAMPLE_S, keep=TIMELINE_SERIES) if way.admin_port else None
        start_s = time.time() + ol.warmup_s
        end_s = start_s + ol.duration_s - ol.warmup_s - END_GUARD_S
        waits = SchedWindow(way.pids, ctx.postmaster_pid, start_s, end_s)
        with sampler or contextlib.nullcontext(), waits:
            cmds, reports, outcomes = clients.run(
                ctx, ol, way.url, d, scripts, rates, seed, ol.duration_s, ol.generator
            )
        # A proxy that died under the load (PgBouncer 1.18 once did, in its cancel handling)
        # leaves a point that measured its clients' failures, not the arm.
        exited = [pid for pid in way.pids if not process_running(pid)]
        gate = gate_state(way.admin_port) if way.admin_port and not exited else None
        if sampler is not None and gate is not None:
            write_timeline(sampler.rows, d / "timeline.csv")
            gate["estimated_cost_ms_mean_over_run"] = estimates_during(sampler.rows)
    logs = {n: (loadpg.read_log if ours else pgbench.read_log)(d / n) for n in CLASSES}
    # pgbench's -T runs from its start, connecting included: its schedule ends then.
    t0 = max(r.started_epoch_s for r in reports.values())
    window = (t0 + ol.warmup_s, t0 + ol.duration_s - END_GUARD_S)
    out: dict = {
        "arm": arm,
        "load": load,
        "capacity": None if policy in ("direct", "pgbouncer") else capacity,
    }
    for n in CLASSES:
        out[n] = classify(logs[n], window, rates[n], ol.timeout_s, logged_all=ours)
        out[n].update(
            **outcomes[n],
            rate_per_s=rates[n],
            # pgbench's transactions/s over its whole run, late ones included: what the
            # database got done of the class, where goodput counts only the timely.
            completed_per_s=reports[n].tps,
            aborted_clients=reports[n].aborted_clients,
            command=" ".join(cmds[n]),
        )
    out["expensive_ceiling_per_s"] = expensive_ceiling(cap, rates)
    # The proxies' and the backends' waits for the CPU over the window (`schedwait`).
    out["cpu_waits"] = waits.result()
    if exited:
        out["proxy_exited"] = exited
        print(f"overload {load:g}x {arm}: the proxy exited during the point (pids {exited})", file=sys.stderr)
    if gate is not None:
        out["gatekeeper"] = gate
    return out


def expensive_ceiling(cap: dict, rates: dict[str, float]) -> float:
    """The most expensive transactions a second the database could complete while serving
    every cheap one, by the measured service times: the CPU the cheap rate leaves, over an
    expensive transaction's service time (at most the expensive rate offered)."""
    left = max(0.0, 1.0 - rates["cheap"] * cap["service_ms"]["cheap"] / 1e3)
    return min(rates["expensive"], left / (cap["service_ms"]["expensive"] / 1e3))


def estimates_during(rows: list[dict]) -> dict[str, float]:
    """Each type's learned cost (ms), averaged over the samples taken while the load ran
    (the value at the end of a point is the drained tail's)."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        for name, ms in row.get("gate", {}).get("estimate_ms", {}).items():
            sums.setdefault(name, []).append(ms)
    return {name: sum(v) / len(v) for name, v in sums.items() if name != "(other)"}


def classify(
    rows: list[pgbench.Row],
    window: tuple[float, float],
    rate_per_s: float,
    timeout_s: float,
    logged_all: bool = False,
) -> dict:
    """One class's figures over the transactions scheduled in `window` (see the module);
    `logged_all`: the log has a row for every scheduled transaction (load-pg's), so none is
    estimated as unreached."""
    w0, w1 = window
    inside = [r for r in rows if w0 <= r.sched_s < w1]
    last = max((r.sched_s for r in rows), default=w0)
    unreached = 0.0 if logged_all else rate_per_s * max(0.0, w1 - max(last, w0))
    offered = len(inside) + unreached
    served = [r for r in inside if r.latency_s <= timeout_s]
    # Every offered transaction's latency, the never-started ones as infinite.
    lat = [r.latency_s for r in inside] + [math.inf] * round(unreached)
    p50, p99 = pgbench.quantile(lat, 0.5), pgbench.quantile(lat, 0.99)
    return {
        "offered": offered,
        "logged": len(inside),
        "unreached_estimate": unreached,
        "served": len(served),
        "served_fraction": len(served) / offered if offered else None,
        "goodput_per_s": len(served) / (w1 - w0),
        "p50_ms": _ms(p50),
        "p99_ms": _ms(p99),
        "p99_served_ms": _ms(pgbench.quantile([r.latency_s for r in served], 0.99)),
        "lag_p99_ms": _ms(pgbench.quantile([r.lag_s for r in inside], 0.99)),
    }


def _ms(s: float | None) -> float | None:
    """Seconds as ms; None for none, or beyond the run (a transaction never started)."""
    return None if s is None or math.isinf(s) else 1e3 * s


def run(ctx: Context, ol: Overload, seed: int, accounts: int) -> dict:
    """The capacity, then every load through every arm (arms in turn at each load)."""
    scripts = write_scripts(ctx.work, accounts, ol)
    cap = capacity.measure(ctx, ol, scripts, seed)
    print(
        f"overload: capacity {cap['capacity_tps']:.0f} tps "
        f"(closed loop {cap['closed_loop_capacity_tps']:.0f}, "
        f"by open-loop costs {cap['capacity_by_costs_tps']:.0f}; service ms {cap['service_ms']}), "
        f"gate capacity {cap['gate_capacity_ms']:.1f} ms",
        file=sys.stderr,
        flush=True,
    )
    points = []
    for load in ol.loads:
        for arm in ol.arms:
            p = point(ctx, ol, arm, load, cap, scripts, seed)
            points.append(p)
            c, e = p["cheap"], p["expensive"]
            print(
                f"overload {load:g}x {arm}: cheap p99 {c['p99_ms']} ms served {c['served_fraction']:.3f}; "
                f"expensive goodput {e['goodput_per_s']:.1f}/s served {e['served_fraction']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "capacity": cap,
        "settings": {k: getattr(ol, k) for k in ol.__dataclass_fields__},
        "pool_size": ctx.pool_size,
        "points": points,
    }
