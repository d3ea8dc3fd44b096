"""The database's capacity for the overload experiment's mix, measured in the run, direct.

A point lookup costs the database far more of its CPU when lookups arrive one by one, as an
open loop sends them, than back to back from a few closed-loop clients, whose wake-ups batch
(a backend that finds its next query waiting skips going idle and waking up again). A
capacity from closed-loop service times therefore overstates what the database can do under
the experiment's own clients, and "1.25×" would mean more than it says. So three steps:

1. **Closed loop** (pgbench, `capacity_clients` clients, `capacity_s` each): each script's
   transactions/s, the first estimate of its service time; and the expensive script's wall
   time under `pool_size` clients, the gatekeeper's charge of it at the pool's concurrency.
2. **Each script alone, open loop** (`shortfirst load-pg`, the overload's clients and
   connections, `capacity_probe_s`), at the rate it has in the mix at `capacity_probe_load`
   of the estimate: its cost is the database's CPU time over the window divided by the
   transactions completed in it.
3. **The mix, open loop**, at `capacity_probe_load` of the capacity those costs give: the
   capacity is the mix's completed transactions/s over the database's busy share, the rate
   at which the CPU would be busy all the time (linear in the rate, as a CPU's work is).

The database's CPU time: the busy time of the reserved CPU (`cpus reserve`: the database and
nothing else runs there in a direct probe, kernel work on its behalf included), or without a
reservation the processor time of the postmaster and its backends (`/proc/PID/stat`; the
backends that ended are in the postmaster's reaped-children times).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ....kit import CLK_TCK, child_stats, cpu_times, stat_fields
from ....spec.pg import Overload, overload_arm
from ..backends.base import GatekeeperError
from . import clients, loadpg, pgbench
from .arms import Context
from .clients import CLASSES

#: How often the database's CPU time is sampled during a probe.
SAMPLE_S = 0.2
#: The part of a probe's schedule left out at its start (connections warming up, at most this
#: share of the probe) and at its end (the transactions in flight when the schedule ends).
LEAD_SHARE = 0.2
TAIL_S = 0.25
#: A probe completing less than this share of its rate did not keep up.
SATURATED_SHARE = 0.95
#: The most samples a probe keeps; past it the sampler stops and the window ends at its last
#: sample (a probe's schedule is at most 600 s by the schema: 3,000 samples).
MAX_SAMPLES = 100_000


class DbCpu:
    """The database's CPU time so far: the busy time of `cpus` (the reserved CPUs it runs on),
    or with none the processor time of the postmaster `postmaster_pid` and its children."""

    def __init__(self, cpus: tuple[int, ...], postmaster_pid: int | None):
        if not cpus and postmaster_pid is None:
            raise GatekeeperError("the database's CPU time: neither a reserved CPU nor a postmaster pid")
        self.cpus, self.pid = cpus, postmaster_pid

    @property
    def source(self) -> str:
        if self.cpus:
            return f"busy time of the reserved CPU(s) {list(self.cpus)} (/proc/stat)"
        return "processor time of the postmaster and its backends (/proc/PID/stat)"

    def seconds(self) -> float:
        if self.cpus:
            return sum(t["busy_s"] for t in cpu_times(list(self.cpus)).values())
        assert self.pid is not None
        return process_tree_cpu_s(self.pid)


def process_tree_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds of process `pid`, its live children and the children it has reaped
    (utime + stime of each, cutime + cstime of `pid`). Grandchildren are not looked for: a
    PostgreSQL backend is the postmaster's child."""
    # proc(5): utime .. cstime are fields 14 .. 17 (3 is the first here).
    own = stat_fields(pid, proc)
    total = sum(int(f) for f in own[11:15]) if own is not None else 0
    total += sum(int(f[11]) + int(f[12]) for f in child_stats(pid, proc).values())
    return total / CLK_TCK


@contextmanager
def sampled(cpu: DbCpu) -> Iterator[list[tuple[float, float]]]:
    """(epoch seconds, CPU seconds) every SAMPLE_S while the block runs, in a thread."""
    samples: list[tuple[float, float]] = [(time.time(), cpu.seconds())]
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(SAMPLE_S) and len(samples) < MAX_SAMPLES:
            samples.append((time.time(), cpu.seconds()))

    t = threading.Thread(target=loop, name="db-cpu", daemon=True)
    t.start()
    try:
        yield samples
    finally:
        stop.set()
        t.join()
        samples.append((time.time(), cpu.seconds()))


def window_cost(
    samples: list[tuple[float, float]], done_s: dict[str, list[float]], start_s: float, duration_s: float
) -> dict:
    """The database's busy share and each class's completions over the sampled window inside
    a probe's schedule [`start_s`, `start_s` + `duration_s`] (`done_s`: each class's
    completion times, epoch seconds)."""
    lo, hi = start_s + LEAD_SHARE * duration_s, start_s + duration_s - TAIL_S
    inside = [s for s in samples if lo <= s[0] <= hi]
    if len(inside) < 2:
        raise GatekeeperError(f"capacity probe: fewer than two CPU samples in its {duration_s:g} s schedule")
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    done = {n: sum(t0 <= t < t1 for t in ts) for n, ts in done_s.items()}
    return {"window_s": t1 - t0, "cpu_s": c1 - c0, "busy": (c1 - c0) / (t1 - t0), "completed": done}


def probe(
    ctx: Context,
    ol: Overload,
    cpu: DbCpu,
    scripts: dict[str, Path],
    rates: dict[str, float],
    d: Path,
    seed: int,
) -> dict:
    """The classes of `rates` at once, direct, open loop for `capacity_probe_s` (load-pg, the
    overload's clients): each one's completions per second in the sampled window, and the
    database's busy share there."""
    d.mkdir(parents=True, exist_ok=True)
    with sampled(cpu) as samples:
        cmds, reports, _ = clients.run(
            ctx, ol, ctx.server_url, d, scripts, rates, seed, ol.capacity_probe_s, "load-pg"
        )
    start = max(r.started_epoch_s for r in reports.values())
    done = {n: [r.end_s for r in loadpg.read_log(d / n) if r.latency_s < math.inf] for n in rates}
    w = window_cost(samples, done, start, ol.capacity_probe_s)
    return {
        **w,
        "rate_per_s": rates,
        "completed_per_s": {n: c / w["window_s"] for n, c in w["completed"].items()},
        # The database could not keep up with the class's rate (its CPU was full, or the
        # probe's clients could not send it): its cost is then the saturated one.
        "saturated": {n: c / w["window_s"] < SATURATED_SHARE * rates[n] for n, c in w["completed"].items()},
        "commands": {n: " ".join(c) for n, c in cmds.items()},
    }


def mix_rates(total_per_s: float, expensive_share: float) -> dict[str, float]:
    return {"cheap": (1 - expensive_share) * total_per_s, "expensive": expensive_share * total_per_s}


def closed_loop(ctx: Context, ol: Overload, scripts: dict[str, Path], seed: int) -> dict:
    """Step 1: each script alone under `capacity_clients` closed-loop clients (pgbench), and the
    expensive one under `pool_size` clients (its wall time at the pool's concurrency)."""
    d = ctx.work / "capacity"
    d.mkdir(parents=True, exist_ok=True)
    runs = {}
    for name, n_clients in (
        ("cheap", ol.capacity_clients),
        ("expensive", ol.capacity_clients),
        ("pool", ctx.pool_size),
    ):
        path = scripts["expensive" if name == "pool" else name]
        cmd = pgbench.argv(
            ctx.server_url, script=["-f", str(path)], protocol=ol.protocol, clients=n_clients,
            duration_s=ol.capacity_s, seed=seed, log_prefix=d / name,
        )  # fmt: skip
        rep = pgbench.run(cmd, d / f"{name}-report.txt", d, ol.capacity_s)
        lat = [r.latency_s for r in pgbench.read_log(d / name)]
        runs[name] = {
            "clients": n_clients,
            "tps": rep.tps,
            "mean_ms": 1e3 * sum(lat) / len(lat),
            "command": " ".join(cmd),
        }
    return runs


def measure(ctx: Context, ol: Overload, scripts: dict[str, Path], seed: int) -> dict:
    """The three steps of the module doc; the capacity (transactions/s of the mix), each
    class's open-loop cost, and the gatekeeper's capacity per cost basis."""
    cpu = DbCpu(ctx.db_cpus, ctx.postmaster_pid)
    runs = closed_loop(ctx, ol, scripts, seed)
    p = ol.expensive_share
    closed_s = {n: 1 / runs[n]["tps"] for n in CLASSES}
    estimate_tps = 1 / ((1 - p) * closed_s["cheap"] + p * closed_s["expensive"])
    d = ctx.work / "capacity"
    rates = mix_rates(ol.capacity_probe_load * estimate_tps, p)
    alone = {n: probe(ctx, ol, cpu, scripts, {n: rates[n]}, d / f"alone-{n}", seed) for n in CLASSES}
    cost_s = {}
    for n in CLASSES:
        if alone[n]["completed"][n] == 0:
            raise GatekeeperError(f"capacity probe of {n} alone completed nothing in its window ({d})")
        cost_s[n] = alone[n]["cpu_s"] / alone[n]["completed"][n]
    by_costs_tps = 1 / ((1 - p) * cost_s["cheap"] + p * cost_s["expensive"])
    mix = probe(ctx, ol, cpu, scripts, mix_rates(ol.capacity_probe_load * by_costs_tps, p), d / "mix", seed)
    mix_done = sum(mix["completed"].values())
    if mix_done == 0 or mix["busy"] <= 0:
        raise GatekeeperError(f"capacity probe of the mix completed nothing or used no CPU ({d})")
    capacity_tps = mix_done / mix["window_s"] / mix["busy"]

    def gate_capacity_ms(basis: str) -> float:
        # The charge of one expensive transaction in the basis's unit: processor time (its
        # open-loop cost) or its wall time at the pool's concurrency.
        charge_s = cost_s["expensive"] if basis == "cpu" else runs["pool"]["mean_ms"] / 1e3
        return 1e3 * (ctx.pool_size + ol.cheap_room) * charge_s

    bases = {ol.estimate_basis} | {b for a in ol.arms if (b := overload_arm(a).basis) is not None}
    return {
        "runs": runs,
        "closed_loop_service_ms": {n: 1e3 * s for n, s in closed_s.items()},
        "closed_loop_capacity_tps": estimate_tps,
        "probes": {"alone": alone, "mix": mix, "cpu_source": cpu.source},
        "service_ms": {n: 1e3 * s for n, s in cost_s.items()},
        "capacity_by_costs_tps": by_costs_tps,
        "capacity_tps": capacity_tps,
        "gate_capacity_ms": gate_capacity_ms(ol.estimate_basis),
        "gate_capacity_ms_by_basis": {b: gate_capacity_ms(b) for b in sorted(bases)},
        "definition": "capacity = the mix's completed transactions/s over the database's CPU busy "
        "share, open loop, direct, at capacity_probe_load of the capacity its classes' open-loop "
        "costs give (service_ms: the database's CPU time per transaction, each script alone at its "
        "rate in the mix at capacity_probe_load of the closed-loop estimate); gate_capacity = "
        "(pool_size + cheap_room) x the expensive script's service time (cpu basis) or mean latency "
        "under pool_size closed-loop clients (other bases)",
    }
