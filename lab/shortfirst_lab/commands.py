"""The command lines of our binaries, built in one place: every flag of `shortfirst load`,
`shortfirst load-pg`, `shortfirst serve`, `shortfirst gatekeeper` (the proxy, `calibrate`,
`synthetic-upstream`), `shortfirst sim` and the TPC-W `bookstore` (`serve`, `gen`) the lab
passes is spelled here once, with its unit written the way the binary reads it (seconds in,
`Nms` out), so a renamed flag is one edit. Values are written with str() unless a unit says
otherwise: what the caller passes is what the binary reads.

Every builder takes the binary first and returns an argv list (no shell). Options left at
None are not passed (the binary's default applies); `extra` goes last, as given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _flags(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    """`--flag value` for every pair whose value is not None."""
    out: list[str] = []
    for flag, value in pairs:
        if value is not None:
            out += [flag, str(value)]
    return out


def ms(seconds: float | None) -> str | None:
    """Seconds as the binaries' duration in whole milliseconds (`1500ms`), or None."""
    return None if seconds is None else f"{1e3 * seconds:.0f}ms"


def load_pg(
    binary: str | Path,
    url: str,
    script: Path,
    out: Path,
    *,
    clients: int,
    duration_s: float,
    rate_per_s: float | None = None,
    timeout_s: float | None = None,
    seed: int | None = None,
) -> list[str]:
    """`shortfirst load-pg`: open loop at `rate_per_s` (None: closed loop), its logs into the
    directory `out`."""
    argv = [str(binary), "load-pg", "--url", url, "--script", str(script), "--out", str(out)]
    return argv + _flags(
        [
            ("--clients", clients),
            ("--duration", ms(duration_s)),
            ("--rate", None if rate_per_s is None else f"{rate_per_s:.3f}"),
            ("--timeout", ms(timeout_s)),
            ("--seed", seed),
        ]
    )


def load(
    binary: str | Path,
    target: str,
    *,
    trace: str | Path | None = None,
    session: str | Path | None = None,
    out: str | Path | None = None,
    model: str | None = None,
    speed: float | None = None,
    duration_s: float | str | None = None,
    persistent: int | None = None,
    timeout_s: float | str | None = None,
    seed: int | None = None,
    threads: int | None = None,
    quiet: bool = False,
    realtime: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """`shortfirst load` in one order: target, trace or session, out, model, speed, duration,
    persistent, timeout, seed, threads, quiet, realtime, then `extra`."""
    if trace is not None and session is not None:
        raise ValueError("commands.load: give a trace or a session, not both")
    argv = [str(binary), "load", "--target", target]
    argv += _flags(
        [
            ("--trace", trace),
            ("--session", session),
            ("--out", out),
            ("--model", model),
            ("--speed", speed),
            ("--duration", duration_s),
            ("--persistent", persistent),
            ("--timeout", timeout_s),
            ("--seed", seed),
            ("--threads", threads),
        ]
    )
    argv += ["--quiet"] * quiet + ["--realtime"] * realtime
    return argv + list(extra)


def serve(
    binary: str | Path,
    *,
    root: str | Path,
    listen: str,
    policy: str | None = None,
    threads: int | None = None,
    admin: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """`shortfirst serve`: the directory it serves, where it listens, its policy, worker
    threads and admin address, then `extra`."""
    argv = [str(binary), "serve", "--root", str(root), "--listen", listen]
    argv += _flags([("--policy", policy), ("--threads", threads), ("--admin", admin)])
    return argv + list(extra)


def gatekeeper(
    binary: str | Path,
    *,
    listen: str,
    upstream: str,
    policy: str | None = None,
    capacity: str | None = None,
    admin: str | None = None,
    max_in_flight: int | None = None,
    max_queue_wait_s: float | None = None,
    max_wait_s: float | None = None,
    overdue_share: float | None = None,
    max_charge_share: float | None = None,
    classify: Sequence[tuple[str, str]] = (),
    estimate_basis: str | None = None,
    patience: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """`shortfirst gatekeeper` (the proxy): where it listens and forwards, its policy and
    capacity (`800ms`, `2500us`, `calibrate`, `auto`), its admin address, its limits, the
    request types (`classify`: NAME=REGEX pairs) and its patience rule (`learn`, `off`, a
    duration)."""
    argv = [str(binary), "gatekeeper", "--listen", listen, "--upstream", upstream]
    argv += _flags([("--policy", policy), ("--capacity", capacity), ("--admin", admin)])
    argv += _classify(classify, max_in_flight, estimate_basis)
    argv += _flags(
        [
            ("--max-queue-wait", ms(max_queue_wait_s)),
            ("--max-wait", ms(max_wait_s)),
            ("--overdue-share", None if overdue_share is None else f"{overdue_share:g}"),
            ("--max-charge-share", None if max_charge_share is None else f"{max_charge_share:g}"),
            ("--patience", patience),
        ]
    )
    return argv + list(extra)


def _classify(classify: Sequence[tuple[str, str]], max_in_flight: int | None, basis: str | None) -> list[str]:
    """The classification, concurrency cap and cost-sample basis the proxy and calibrate share."""
    argv = [a for name, pattern in classify for a in ("--classify", f"{name}={pattern}")]
    return argv + _flags([("--max-in-flight", max_in_flight), ("--estimate-basis", basis)])


def calibrate(
    binary: str | Path,
    *,
    upstream: str,
    out: str | Path,
    clients: int,
    warmup: str,
    measure: str,
    min_capacity: str,
    max_capacity: str,
    max_trials: int | None = None,
    refine_steps: int | None = None,
    repeats: int | None = None,
    growth: float | None = None,
    tolerance: float | None = None,
    mix: str | Path | None = None,
    paths: Sequence[tuple[str, float]] = (),
    classify: Sequence[tuple[str, str]] = (),
    max_in_flight: int | None = None,
    estimate_basis: str | None = None,
) -> list[str]:
    """`shortfirst gatekeeper calibrate`: the capacity search against an upstream alone, with
    a request mix from a file (`mix`) or as PATH:WEIGHT pairs (`paths`)."""
    argv = [str(binary), "gatekeeper", "calibrate", "--upstream", upstream, "--out", str(out)]
    argv += _flags([("--clients", clients), ("--warmup", warmup), ("--measure", measure)])
    argv += _flags([("--min", min_capacity), ("--max", max_capacity), ("--max-trials", max_trials)])
    argv += _flags([("--refine-steps", refine_steps), ("--repeats", repeats), ("--growth", growth)])
    if tolerance is not None:
        argv.append(f"--tolerance={tolerance:g}")  # `=`: a negative value is not a flag
    argv += _flags([("--mix", mix)])
    argv += [a for path, weight in paths for a in ("--path", f"{path}:{weight:g}")]
    return argv + _classify(classify, max_in_flight, estimate_basis)


def synthetic_upstream(
    binary: str | Path,
    *,
    listen: str,
    scale: float,
    cpus: int,
    slots: int,
    thrash: float,
    write_mix: str | Path,
) -> list[str]:
    """`shortfirst gatekeeper synthetic-upstream`: the TPC-W-like backend of the synthetic
    bench, writing its request mix to `write_mix`."""
    argv = [str(binary), "gatekeeper", "synthetic-upstream", "--listen", listen]
    return argv + _flags(
        [
            ("--scale", scale),
            ("--cpus", cpus),
            ("--slots", slots),
            ("--thrash", thrash),
            ("--write-mix", write_mix),
        ]
    )


def bookstore_serve(
    binary: str | Path,
    *,
    db: str,
    listen: str,
    pool: int,
    request_log: str | Path | None = None,
    best_sellers_repeat: int | None = None,
    route_comments: bool = False,
) -> list[str]:
    """`bookstore serve`: the TPC-W bookstore on `db` with a pool of `pool` connections; one
    row per request in `request_log`; Best Sellers' query run `best_sellers_repeat` times; with
    `route_comments`, every statement tagged with its interaction's route (sqlcommenter)."""
    argv = [str(binary), "serve"] + (["--sql-route-comments"] if route_comments else [])
    return argv + _flags(
        [
            ("--db", db),
            ("--listen", listen),
            ("--pool", pool),
            ("--request-log", request_log),
            ("--best-sellers-repeat", best_sellers_repeat),
        ]
    )


def bookstore_gen(binary: str | Path, *, db: str, items: int, customers: int, seed: int) -> list[str]:
    """`bookstore gen`: a generated TPC-W database of `items` items and `customers` customers."""
    argv = [str(binary), "gen"]
    return argv + _flags([("--db", db), ("--items", items), ("--customers", customers), ("--seed", seed)])


def sim(
    binary: str | Path,
    *,
    policy: str,
    rate: int | str,
    out: str | Path,
    trace: str | Path | None = None,
    workload: str | None = None,
    jobs: int | None = None,
    seed: int | None = None,
    arrival_rate: float | None = None,
    load: float | None = None,
    servers: int | None = None,
    dispatch: str | None = None,
    warmup_jobs: int | None = None,
    summary_only: bool = False,
) -> list[str]:
    """`shortfirst sim`: a trace, or the simulator's own workload (`workload`, `jobs`, `seed`,
    at `arrival_rate` or `load`), through one policy at a link rate (bits/s or `10mbit`); with
    `dispatch` (`round-robin`, `sita:20K`, ...) a farm of `servers` hosts of that rate each."""
    argv = [str(binary), "sim", "--policy", policy, "--link-rate", str(rate), "--out", str(out)]
    argv += _flags([("--trace", trace), ("--workload", workload), ("--jobs", jobs), ("--seed", seed)])
    argv += _flags([("--arrival-rate", arrival_rate), ("--load", load)])
    argv += _flags([("--servers", servers), ("--dispatch", dispatch), ("--warmup-jobs", warmup_jobs)])
    return argv + ["--summary-only"] * summary_only


def bench_sim(out: str | Path, jobs: int, *, cargo: str = "cargo") -> list[str]:
    """The simulator's speed benchmark (`crates/sim/examples/bench_sim.rs`), built and run in
    release by cargo: every policy on the same workloads of `jobs` jobs, JSON to `out`."""
    argv = [cargo, "run", "--release", "--locked", "-q", "-p", "shortfirst-sim", "--example", "bench_sim"]
    return argv + ["--", str(out), str(jobs)]
