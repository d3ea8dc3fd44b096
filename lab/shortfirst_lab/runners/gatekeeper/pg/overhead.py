"""Experiment 2, the proxies' overhead and protocol coverage: every script (pgbench's
select-only and TPC-B-like builtins, the generated `distinct` script) × query protocol ×
client count, through each arm in turn (direct, PgBouncer, the gatekeeper), each started
fresh for its point. Per point and arm: transactions/s (pgbench's, without connection time),
the median and p99 latency from the per-transaction logs, and the proxy's CPU per
transaction (its utime + stime from /proc around the run, over the transactions done).

The arm `gatekeeper+pgbouncer` is the gatekeeper in front of PgBouncer (PgBouncer's pool
to the server, the gatekeeper's gate before it): its proxy CPU is both processes', the
gatekeeper's own share beside it (`gatekeeper_cpu_us_per_transaction`).

PgBouncer 1.18 in transaction mode keeps no prepared statements: its `prepared` points (and
the chain's) are not run (reported as skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ....kit import process_cpu_s
from ....spec.pg import POOLED_ARM, Overhead
from . import pgbench
from .arms import Context, gate_state, way_in


def script_args(script: str, work: Path, accounts: int, texts: int) -> list[str]:
    """pgbench's options for `script`: a builtin, or the generated distinct-texts file."""
    if script == "select-only":
        return ["-S"]
    if script == "tpcb-like":
        return ["-b", "tpcb-like"]
    path = work / f"distinct-{texts}.sql"
    if not path.exists():
        path.write_text(pgbench.distinct_script(accounts, texts))
    return ["-f", str(path)]


def point(ctx: Context, oh: Overhead, arm: str, key: tuple[str, str, int], seed: int, accounts: int) -> dict:
    """One arm at one (script, protocol, clients) point."""
    script, protocol, clients = key
    tag = f"{script}-{protocol}-c{clients}-{arm}"
    d = ctx.work / "overhead" / tag
    d.mkdir(parents=True, exist_ok=True)
    gated = arm.startswith("gatekeeper")
    with way_in(
        ctx,
        oh.policy if gated else arm,
        d / "proxy.log",
        capacity="auto" if gated else None,
        pooled=arm == POOLED_ARM,
    ) as way:
        cpu0 = {pid: process_cpu_s(pid) for pid in way.pids}
        cmd = pgbench.argv(
            way.url,
            script=script_args(script, ctx.work, accounts, oh.distinct_texts),
            protocol=protocol,
            clients=clients,
            duration_s=oh.duration_s,
            seed=seed,
            log_prefix=d / "tx",
        )
        rep = pgbench.run(cmd, d / "report.txt", d, oh.duration_s)
        cpus_s = {pid: process_cpu_s(pid) - before for pid, before in cpu0.items()}
        cpu_s = sum(cpus_s.values()) if cpus_s else None
        gate = gate_state(way.admin_port) if way.admin_port else None
    lat = [r.latency_s for r in pgbench.read_log(d / "tx")]
    out = {
        "tps": rep.tps,
        "transactions": rep.transactions,
        "logged": len(lat),
        "aborted_clients": rep.aborted_clients,
        "median_ms": _ms(pgbench.quantile(lat, 0.5)),
        "p99_ms": _ms(pgbench.quantile(lat, 0.99)),
        "proxy_cpu_s": cpu_s,
        "proxy_cpu_us_per_transaction": 1e6 * cpu_s / rep.transactions
        if cpu_s is not None and rep.transactions
        else None,
        "command": " ".join(cmd),
    }
    if way.behind:  # the gatekeeper's own share of the chain's CPU
        gk_s = cpus_s[way.pid] if way.pid else None
        out["gatekeeper_cpu_us_per_transaction"] = (
            1e6 * gk_s / rep.transactions if gk_s and rep.transactions else None
        )
    if gate is not None:
        out["gatekeeper"] = gate
    return out


def _ms(s: float | None) -> float | None:
    return None if s is None else 1e3 * s


def run(ctx: Context, oh: Overhead, seed: int, accounts: int) -> dict:
    """Every point, the arms of each one after the other (so a drift of the machine touches
    them alike). Per point: each arm's figures, and against direct the added median latency
    and the transactions/s ratio."""
    points = []
    for script in oh.scripts:
        for protocol in oh.protocols:
            for clients in oh.clients:
                key = (script, protocol, clients)
                arms: dict[str, dict] = {}
                for arm in oh.arms:
                    if arm in ("pgbouncer", POOLED_ARM) and protocol == "prepared":
                        arms[arm] = {
                            "skipped": "PgBouncer 1.18 keeps no prepared statements in transaction mode"
                        }
                        continue
                    arms[arm] = point(ctx, oh, arm, key, seed, accounts)
                p = {"script": script, "protocol": protocol, "clients": clients, "arms": arms}
                p["added_median_us"] = _added(arms)
                points.append(p)
                print(f"overhead {script} {protocol} c={clients}: {_line(arms)}", file=sys.stderr, flush=True)
    return {"duration_s": oh.duration_s, "policy": oh.policy, "capacity": "auto", "points": points}


def _added(arms: dict[str, dict]) -> dict[str, float | None]:
    """Each proxy's median latency over direct's, in microseconds."""
    base = arms.get("direct", {}).get("median_ms")
    out = {}
    for arm, a in arms.items():
        if arm != "direct" and base is not None and a.get("median_ms") is not None:
            out[arm] = 1e3 * (a["median_ms"] - base)
    return out


def _line(arms: dict[str, dict]) -> str:
    return ", ".join(
        f"{arm} {a['tps']:.0f} tps p50 {a['median_ms']:.3f} ms" if "tps" in a and a["tps"] else f"{arm} -"
        for arm, a in arms.items()
    )
