"""The overload experiment's clients, one process per class of transactions, open loop: for a
point (through an arm, `overload.generator`) and for a capacity probe (direct, load-pg).
"""

from __future__ import annotations

from pathlib import Path

from .... import commands
from ....spec.pg import Overload
from . import loadpg, pgbench
from .arms import Context

#: The classes, in the order their seeds are drawn (`seed + index`).
CLASSES = ("cheap", "expensive")


def run(
    ctx: Context,
    ol: Overload,
    url: str,
    d: Path,
    scripts: dict[str, Path],
    rates: dict[str, float],
    seed: int,
    duration_s: float,
    generator: str,
) -> tuple[dict[str, list[str]], dict[str, pgbench.Report], dict[str, dict]]:
    """The classes of `rates` at once against `url` for `duration_s`, to their end: each one's
    command line, its pgbench-like report, and (load-pg) what became of its transactions. A
    class's seed is `seed` + its index in CLASSES, whichever classes run."""
    clients = {"cheap": ol.cheap_clients, "expensive": ol.expensive_clients}
    cmds, started = {}, {}
    for name in rates:
        cmds[name] = argv(
            ctx, ol, url, scripts[name], clients[name], seed + CLASSES.index(name), rates[name], d / name,
            duration_s, generator,
        )  # fmt: skip
        started[name] = pgbench.start(cmds[name], d / f"{name}-report.txt", d)
    limit_s = duration_s + pgbench.GRACE_S
    if generator != "load-pg":
        return cmds, {n: pgbench.finish(started[n], limit_s) for n in rates}, {n: {} for n in rates}
    done = {n: loadpg.report(started[n], limit_s, d / n) for n in rates}
    outcomes = {n: {"outcomes": done[n][1]["outcomes"], "sqlstates": done[n][1]["sqlstates"]} for n in rates}
    return cmds, {n: done[n][0] for n in rates}, outcomes


def argv(
    ctx: Context,
    ol: Overload,
    url: str,
    script: Path,
    clients: int,
    seed: int,
    rate: float,
    out: Path,
    duration_s: float,
    generator: str,
) -> list[str]:
    """One class's client, open loop: load-pg (logs in the directory `out`) or pgbench (its
    logs named `out.PID`)."""
    if generator == "load-pg":
        return commands.load_pg(
            ctx.binary, url, script, out, clients=clients, duration_s=duration_s, rate_per_s=rate,
            timeout_s=ol.timeout_s, seed=seed,
        )  # fmt: skip
    return pgbench.argv(
        url, script=["-f", str(script)], protocol=ol.protocol, clients=clients, duration_s=duration_s,
        seed=seed, rate_per_s=rate, log_prefix=out,
    )  # fmt: skip
