"""The gatekeeper's capacity for a sweep: `shortfirst gatekeeper calibrate` in a closed loop
with the shopping mix, or the experiment's own browsers at a range of capacities.
"""

from __future__ import annotations

from pathlib import Path

from ....spec.tpcw import parse_capacity_us
from .. import run
from ..backends.base import GatekeeperError
from ..backends.bookstore import BookstoreBackend
from .config import Binaries


def calibrate(
    bins: Binaries,
    backend: BookstoreBackend,
    upstream: str,
    workdir: Path,
    clients: int,
    measure_s: float,
    max_trials: int = 30,
    min_capacity: str = "10ms",
    max_capacity: str = "600s",
    growth: float = 2.0,
    within: float = 0.05,
    warmup_s: float = 2.0,
) -> tuple[str, dict]:
    """Runs ``shortfirst gatekeeper calibrate`` with the shopping mix; returns (capacity, record).

    Every step from ``min_capacity`` to ``max_capacity`` is measured (``--tolerance=-1``, no
    golden-section refinement): on a backend whose throughput plateaus instead of collapsing
    (PostgreSQL on this machine, see the report) the search's early stop lands on noise. The
    answer is the *smallest* capacity whose throughput is within ``within`` of the best trial —
    the paper's "capacity that gives peak throughput", and the one that keeps the most work in
    the gatekeeper's queue, where SJF can reorder it. ``min_capacity`` should not be below the
    costliest frequent interaction (Best Sellers): a request costlier than the capacity runs
    alone, which idles the database between such requests."""
    cal = run.calibrate(
        bins.shortfirst,
        upstream,
        workdir / "calibration.json",
        clients=clients,
        warmup=f"{warmup_s}s",
        measure=f"{measure_s}s",
        min_capacity=min_capacity,
        max_capacity=max_capacity,
        max_trials=max_trials,
        refine_steps=0,
        growth=growth,
        tolerance=-1,
        **backend.calibration_mix(),
    )
    trials = cal["trials"]
    capacity_us = choose_capacity(trials, within)
    record = {
        "trials": trials,
        "best_capacity_us": cal["best_capacity_us"],
        "within": within,
        "chosen_capacity_us": capacity_us,
    }
    return f"{max(1, round(capacity_us / 1000))}ms", record


def calibrate_with_browsers(
    measure,
    browsers: int,
    min_capacity: str,
    max_capacity: str,
    growth: float = 2.0,
    within: float = 0.05,
    duration_s: float = 40.0,
    warmup_s: float = 20.0,
    max_trials: int = 6,
) -> tuple[str, dict]:
    """Calibrates the capacity against the load the experiment runs: the experiment's own emulated
    browsers (closed model, think time, shopping mix, client timeout), ``browsers`` of them (by
    default the sweep's highest count: the gatekeeper's capacity matters past saturation),
    through a fifo gatekeeper at every capacity from ``min_capacity`` multiplying by ``growth`` up
    to ``max_capacity`` (at most ``max_trials``). ``measure(capacity, browsers, duration_s,
    warmup_s)`` runs one point and returns it. The answer is the smallest capacity whose
    successful throughput is within ``within`` of the best trial's (as ``choose_capacity``)."""
    lo, hi = parse_capacity_us(min_capacity), parse_capacity_us(max_capacity)
    if not (0 < lo <= hi) or growth <= 1.0 or max_trials < 1:
        raise GatekeeperError(
            "calibration: need 0 < calibrate_min <= calibrate_max, calibrate_growth > 1 and "
            f"calibrate_max_trials >= 1; got {min_capacity}, {max_capacity}, {growth}, {max_trials}"
        )
    trials = []
    cap = lo
    while cap <= hi * 1.0001 and len(trials) < max_trials:
        label = f"{max(1, round(cap / 1000))}ms"
        r = measure(label, browsers, duration_s, warmup_s)
        trials.append(
            {
                "capacity_us": parse_capacity_us(label),
                "throughput_per_s": r["throughput_per_min"] / 60.0,
                "throughput_per_min": r["throughput_per_min"],
                "full_throughput_per_min": r["full"]["throughput_per_min"],
                "timed_out": r["timed_out"],
                "mean_response_s": r["mean_response_s"],
            }
        )
        print(
            f"  calibrate {label:>8}: {r['throughput_per_min']:8.0f}/min at {browsers} browsers", flush=True
        )
        cap *= growth
    chosen = choose_capacity(trials, within)
    record = {
        "method": "browsers",
        "browsers": browsers,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "trials": trials,
        "within": within,
        "chosen_capacity_us": chosen,
    }
    return f"{max(1, round(chosen / 1000))}ms", record


def choose_capacity(trials: list[dict], within: float) -> int:
    """The smallest trial capacity whose throughput is at least (1 − within) × the best trial's."""
    if not trials:
        raise GatekeeperError("calibrate measured no trial")
    best = max(t["throughput_per_s"] for t in trials)
    if best <= 0:
        raise GatekeeperError("calibrate: no trial completed a request")
    return min(t["capacity_us"] for t in trials if t["throughput_per_s"] >= (1.0 - within) * best)
