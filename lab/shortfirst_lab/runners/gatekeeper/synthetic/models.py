"""The closed and open model runs: calibrate the capacity (or take the given one), then every
configuration at every load factor.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from .. import run
from ..backends.synthetic import read_mix, type_cost_ms
from .points import Bench


def factors(spec: str) -> list[float]:
    """`--closed-factors` / `--open-factors`: comma-separated multiples; empty = none."""
    return [float(x) for x in spec.split(",") if x.strip()]


def write_trace(
    path: Path, mix: list[tuple[str, float]], rate_per_s: float, duration_s: float, seed: int
) -> int:
    """Poisson arrivals at `rate_per_s`, paths drawn from the mix (`run.write_trace`)."""
    paths, weights = [p for p, _ in mix], [w for _, w in mix]

    def draw(rng: random.Random) -> str:
        return rng.choices(paths, weights)[0]

    return run.write_trace(path, draw, rate_per_s, duration_s, seed)


def calibrate(b: Bench, upstream: str, work: Path) -> dict:
    """`shortfirst gatekeeper calibrate` against the running upstream, with its mix; the
    calibration record (its trials and best capacity)."""
    a = b.a
    return run.calibrate(
        b.bin,
        upstream,
        work / "calibration.json",
        timeout_s=600,
        clients=2 * a.slots,
        warmup="2s",
        measure="5s",
        min_capacity=f"{a.scale * 20}ms",
        max_capacity=f"{a.scale * 20000}ms",
        max_trials=16,
        refine_steps=2,
        max_in_flight=a.max_in_flight or None,
        **b.backend().calibration_mix(),
    )


def run_models(b: Bench, work: Path) -> tuple[str, dict | None, dict]:
    """Calibration (unless --capacity is given), then the closed and open runs."""
    a = b.a
    with b.upstream() as up:
        mix = read_mix(work / "mix.csv")
        total_w = sum(w for _, w in mix)
        mean_cost_ms = sum(w * type_cost_ms(p, a.scale) for p, w in mix) / total_w
        calibration = None
        if a.capacity == "calibrate":
            calibration = calibrate(b, up.url, work)
            capacity = f"{calibration['best_capacity_us'] / 1e3:.3f}ms"
        else:
            capacity = a.capacity
    print(f"capacity: {capacity}", file=sys.stderr, flush=True)

    # Offered loads relative to the peak throughput: measured by calibration, or the
    # model's analytic peak (slots / mean cost) without it.
    if calibration is not None:
        peak_est = max(t["throughput_per_s"] for t in calibration["trials"])
    else:
        peak_est = a.cpus / (mean_cost_ms / 1e3)
    results = {"closed": {}, "open": {}}
    # Closed model: N users with think time Z keep the backend at its peak when
    # N = peak x (Z + response time); at saturation the response time is small next to Z.
    closed_users = {}
    for f in factors(a.closed_factors):
        users = max(1, round(f * peak_est * a.think_s))
        closed_users[f] = users
    open_rates = {f: f * peak_est for f in factors(a.open_factors)}
    # Every gatekeeper point runs with the main --max-queue-wait; with
    # --compare-max-queue-wait it runs again right after with the other setting, reported
    # under "max_queue_wait_comparison" (not used for the targets).
    wait_s = a.max_queue_wait_s
    other = a.compare_max_queue_wait_s
    compare = {"closed": {}, "open": {}} if a.compare_max_queue_wait else None

    def point(config: str, model_name: str, model: str, trace: Path, tag: str) -> dict:
        s = b.one_run(config, capacity, model, trace, tag, wait_s)
        if compare is not None and config != "direct":
            c = b.one_run(config, capacity, model, trace, f"{tag}-wait-{a.compare_max_queue_wait}", other)
            compare[model_name].setdefault(config, []).append(c)
        return s

    closed_trace = work / "closed-trace.csv"
    write_trace(closed_trace, mix, 1000.0, a.duration * 4, a.seed)
    for config in [c for c in a.configs.split(",") if c]:
        results["closed"][config] = []
        for f, users in closed_users.items():
            model = f"closed:{users},think=exp:{a.think_s}"
            s = point(config, "closed", model, closed_trace, f"closed-{config}-{users}")
            runs = [s, *([compare["closed"][config][-1]] if compare and config in compare["closed"] else [])]
            for r in runs:
                r.update({"users": users, "load_factor": f})
                ll = r["littles_law"]
                ll["users"] = users
                ll["ratio"] = ll["n_from_logs"] / users
            results["closed"][config].append(s)
    for config in [c for c in a.open_configs.split(",") if c]:
        results["open"][config] = []
        for f, rate in open_rates.items():
            trace = work / f"open-{f}.csv"
            write_trace(trace, mix, rate, a.duration, a.seed)
            s = point(config, "open", "open", trace, f"open-{config}-{rate:.0f}")
            runs = [s, *([compare["open"][config][-1]] if compare and config in compare["open"] else [])]
            for r in runs:
                r.update({"rate_per_s": rate, "load_factor": f})
                r.pop("littles_law")  # no fixed population in an open model
            results["open"][config].append(s)
    if compare is not None:
        b.comparison = {
            "max_queue_wait_s": other,
            "method": a.compare_max_queue_wait_method,
            **compare,
        }
    return capacity, calibration, results
