"""Policies against their baselines on the same trace: which pairs are compared, one row per
pair and point, per client group, the improvement table of the SRRT paper (Al-Sadeh and Yahya
2008, Table 2 and Figure 4), its closing numbers, and srrt's estimate accuracy per run.

Everything is computed from a run's raw files; :mod:`report` calls it.

Pairs: the experiment's ``baselines`` (default: fair, then srpt when srpt and srrt both run),
from weakest to strongest. A policy that is a baseline is compared with the baselines before
it; any other policy with every baseline. With fair, srpt, srrt: srpt vs fair, srrt vs fair,
srrt vs srpt. A pair is compared at each point (load, WAN path, repeat) where both ran.

Conventions (as `analysis.compare`): ``mean_response_ratio`` = baseline's mean ÷ the policy's
(> 1: the policy is better); ``improvement_pct`` = 100 · (1 − policy's mean ÷ baseline's), the
paper's "percentage improvement"; throughput ratio = policy ÷ baseline. Stretch
S(r) = RT_policy(r) ÷ RT_baseline(r) per request id completed under both (`analysis.stretch`):
``fraction_starved`` (S > 1) and ``max_stretch``, and beyond the testbed's resolution δ (one
segment's time on the uplink, at least 1 ms: ``stretch_resolution_s``)
``fraction_starved_resolved`` (RT_policy > RT_baseline + δ) and ``max_stretch_resolved``
(the largest RT_policy ÷ (RT_baseline + δ)); ``largest_file_stretch`` is the largest S
among the requests for the window's largest size (the paper's "largest file"), with
``largest_file_unmatched`` counting those completed under one policy only (a timeout there is
starvation the stretch cannot show). A row is ``valid`` when both runs are.

Arms (``experiment.arms``: a policy under a scheduler, `srpt/user`): runs are told apart by arm,
baselines name arms (``fair`` is FAIR under the kernel's bands), and every row also carries the
run's ``arm``, ``scheduler`` and ``measured_over_ideal``: its measured mean ÷ ``models.simulated_s``,
the simulator's mean on the run's own arrivals under the policy the arm runs (FAIR: processor
sharing; SRPT in the kernel: SRPT by the server's size classes; SRPT in user space: exact SRPT).
``arm_comparisons`` then has one entry per arm and load (repeats averaged, as the improvement
table does): each arm against the weakest baseline, the baseline itself included (ratios 1, no
request starved), with ``policy``, ``scheduler``, ``load``, ``mean_response_ratio``,
``throughput_ratio``, ``link_throughput_ratio``, ``fraction_starved``, ``max_stretch``,
``measured_over_ideal`` and ``measured_over_wire_ideal``: the measured mean ÷
``models.wire_simulated_s``, the same replay with each request's wire cost (head, segment
headers, connection control bytes, fitted to the uplink's byte count) as its service; and
``ideal_fraction_starved``, ``ideal_max_stretch`` (and beyond δ): the stretch of the arm's wire
ideal against the baseline's, the starvation its policy has on this trace whoever schedules it
(`ideal_stretch`). The wire ideal is the honest one, the best any scheduler could do on this
link: the payload ideal's link carries 15% fewer bytes than the real one, so at "load 0.9" it
runs at ρ = 0.9 while the wire runs at ρ ≈ 1, and measured ÷ ideal grows with load for that
reason alone (kernel SRPT on the 10 Mbit/s testbed: 2.7 at 0.9, 3.2 at 0.95 against the payload
ideal; 1.00 and 0.99 against the wire ideal; see `models`). ``throughput_ratio`` compares the
body bytes the clients received in the window, counted per 100 ms as the generator's reads
returned (`received.csv`); for runs without that file it spreads each response's bytes evenly
from its first byte to its last, so a policy that starts a long response early and finishes it
after the window shows less than it sent (each run's ``throughput_method`` says which).
``link_throughput_ratio`` is the uplink's own byte count in the window
(`analysis.link_bits_per_s`), the check that no link time was lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..spec.experiment import Experiment
from . import metrics as analysis
from . import models, srrtmetrics, wanreport

#: Al-Sadeh and Yahya 2008, Table 2: (average, max) % improvement over their loads.
PAPER_IMPROVEMENT_PCT = {
    10_000_000: {
        ("srrt", "srpt"): (7.5, 13.2),
        ("srrt", "fair"): (13.6, 24.2),
        ("srpt", "fair"): (6.8, 13.7),
    },
    100_000_000: {
        ("srrt", "srpt"): (7.4, 11.6),
        ("srrt", "fair"): (7.1, 16.2),
        ("srpt", "fair"): (2.6, 5.8),
    },
}
#: The paper's closing numbers per uplink: (policy, baseline, key, op, threshold, source), at the
#: highest load where the pair's runs are valid. 10 Mbit/s: SRRT 7.5% better than SRPT, 2.4% of
#: requests slower than under PS (bar at 2.5%), the largest at most 2.2x; 100 Mbit/s: 7.4%,
#: 1.5%, 1.7x. Throughput: within 1% of FAIR.
PAPER_TARGETS = {
    10_000_000: (
        ("srrt", "srpt", "improvement_pct", ">=", 7.5, "Al-Sadeh 2008 Table 2 (10 Mbit/s average)"),
        ("srrt", "fair", "fraction_starved", "<=", 0.025, "Al-Sadeh 2008 §5.3 (2.4% at 10 Mbit/s)"),
        ("srrt", "fair", "largest_file_stretch", "<=", 2.2, "Al-Sadeh 2008 §5.3"),
        ("srrt", "fair", "throughput_ratio", ">=", 0.99, "no throughput lost"),
    ),
    100_000_000: (
        ("srrt", "srpt", "improvement_pct", ">=", 7.4, "Al-Sadeh 2008 Table 2 (100 Mbit/s average)"),
        ("srrt", "fair", "fraction_starved", "<=", 0.015, "Al-Sadeh 2008 §5.3 (1.5% at 100 Mbit/s)"),
        ("srrt", "fair", "largest_file_stretch", "<=", 1.7, "Al-Sadeh 2008 §5.3"),
        ("srrt", "fair", "throughput_ratio", ">=", 0.99, "no throughput lost"),
    ),
}


#: Beside fraction_starved (S > 1): how far S spreads, to tell starvation from path noise, and
#: the stretch beyond the testbed's resolution δ (`analysis.stretch`).
NOISE_KEYS = (
    "median_stretch",
    "fraction_stretch_over_1_25",
    "fraction_stretch_over_2",
    "stretch_resolution_s",
    "fraction_starved_resolved",
    "max_stretch_resolved",
)


def uplink_label(bits_per_s: int) -> str:
    """``10mbit`` for 10_000_000, as experiment files write rates."""
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits_per_s % scale == 0:
            return f"{bits_per_s // scale}{unit}"
    return f"{bits_per_s}bit"


def baselines(exp: Experiment) -> tuple[str, ...]:
    """The experiment's baselines, weakest first (see the module doc for the default):
    `Experiment.baseline_labels`."""
    return exp.baseline_labels()


def arm_of(run: Any) -> str:
    """A run's arm label (`srpt`, `srpt/user`); a run without one is its policy's kernel arm."""
    return getattr(run, "arm", run.policy)


def measured_over_ideal(metrics: dict[str, Any], key: str = "simulated_s") -> float | None:
    """Measured mean response ÷ the simulator's on the same arrivals (module doc)."""
    measured, ideal = metrics.get("mean_response_s"), metrics.get("models", {}).get(key)
    return None if measured is None or not ideal else float(measured) / float(ideal)


def measured_over_wire_ideal(metrics: dict[str, Any]) -> float | None:
    """Measured mean response ÷ the wire-accurate ideal's (module doc)."""
    return measured_over_ideal(metrics, "wire_simulated_s")


def pairs(policies: Iterable[str], bases: tuple[str, ...]) -> list[tuple[str, str]]:
    """(policy, baseline) pairs in policy order, then baseline order."""
    out = []
    for p in policies:
        for b in bases:
            if b == p or (p in bases and bases.index(p) < bases.index(b)):
                continue
            out.append((p, b))
    return out


def pair_name(policy: str, baseline: str) -> str:
    return f"{policy}_vs_{baseline}"


def improvement_pct(ratio: float | None) -> float | None:
    """100 · (1 − policy ÷ baseline) from mean_response_ratio = baseline ÷ policy."""
    return None if not ratio else 100.0 * (1.0 - 1.0 / ratio)


def resolution_s(exp: Experiment) -> float:
    """The experiment's stretch resolution δ (`analysis.stretch_resolution_s`)."""
    return analysis.stretch_resolution_s(exp.uplink.rate_bits_per_s, exp.uplink.mtu)


def stretch(policy: pd.DataFrame, base: pd.DataFrame, resolution: float | None = None) -> dict[str, Any]:
    """`analysis.stretch` over all requests and over the largest size's (module doc)."""
    out = dict(analysis.stretch(policy, base, resolution))
    out.update(largest_file_size_bytes=None, largest_file_stretch=None, largest_file_unmatched=0)
    if policy.empty:
        return out
    size = policy["size_bytes"].max()
    p_big, b_big = policy[policy["size_bytes"] == size], base[base["size_bytes"] == size]
    big = analysis.stretch(p_big, b_big)
    p_ok = set(p_big.loc[p_big["response_s"].notna(), "id"])
    b_ok = set(b_big.loc[b_big["response_s"].notna(), "id"])
    out.update(
        largest_file_size_bytes=int(size),
        largest_file_stretch=big["max_stretch"],
        largest_file_unmatched=len(p_ok ^ b_ok),
    )
    return out


def _group_rows(
    p_req: pd.DataFrame,
    b_req: pd.DataFrame,
    p_metrics: dict,
    b_metrics: dict,
    record: dict,
    resolution: float,
) -> list[dict[str, Any]]:
    """Per group: the means, their ratio and improvement, and the stretch of the group's requests."""
    means = {g["name"]: g for g in b_metrics["groups"]}
    own = {g["name"]: g for g in p_metrics["groups"]}
    rows = []
    for row in wanreport.compare_groups(p_metrics["groups"], b_metrics["groups"]):
        clients = next((g["clients"] for g in record["groups"] if g["name"] == row["name"]), [])
        st = stretch(p_req[p_req["client"].isin(clients)], b_req[b_req["client"].isin(clients)], resolution)
        rows.append(
            row
            | {
                "improvement_pct": improvement_pct(row["mean_response_ratio"]),
                "mean_response_s": own[row["name"]]["mean_response_s"],
                "baseline_mean_response_s": means[row["name"]]["mean_response_s"],
                "matched": st["matched"],
                "fraction_starved": st["fraction_starved"],
                "max_stretch": st["max_stretch"],
                "largest_file_stretch": st["largest_file_stretch"],
            }
            | {k: st.get(k) for k in NOISE_KEYS}
        )
    return rows


def compare_runs(
    runs: list[Any], exp: Experiment, groups_of: Callable[[str], dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """One row per (policy, baseline) pair and point, in run order, then baseline order.

    ``runs`` are report.RunData (policy, key, requests of the window, metrics, path);
    ``groups_of(run)`` gives a run's groups.json record (client ids per group) or None.
    """
    by_key = {(arm_of(r), *r.key): r for r in runs}
    bases = baselines(exp)
    wanted = set(pairs(exp.arm_labels(), bases))
    uplink = uplink_label(exp.uplink.rate_bits_per_s)
    delta_s = resolution_s(exp)
    out = []
    for r in runs:
        for b_name in bases:
            b = by_key.get((b_name, *r.key))
            if (arm_of(r), b_name) not in wanted or b is None:
                continue
            st = stretch(r.requests, b.requests, delta_s)
            c = analysis.compare(r.metrics, b.metrics, st)
            c["baseline"] = b_name
            c["uplink"] = uplink
            c["improvement_pct"] = improvement_pct(c["mean_response_ratio"])
            c.update({k: st.get(k) for k in ("matched", "largest_file_size_bytes", "largest_file_stretch")})
            c.update({k: st.get(k) for k in NOISE_KEYS})
            c["largest_file_unmatched"] = st["largest_file_unmatched"]
            c["valid"] = r.metrics["valid"] and b.metrics["valid"]
            if exp.arms:
                c.update(arm=arm_of(r), scheduler=getattr(r, "scheduler", "kernel"))
                c["measured_over_ideal"] = measured_over_ideal(r.metrics)
                c["measured_over_wire_ideal"] = measured_over_wire_ideal(r.metrics)
                c.update(ideal_stretch(r, b, delta_s))
            if r.path is not None:
                c.update(path=r.path, rtt_ms=r.metrics["rtt_ms"], loss=r.metrics["loss"])
            record = groups_of(r.run)
            if "groups" in r.metrics and "groups" in b.metrics and record is not None:
                c["groups"] = _group_rows(r.requests, b.requests, r.metrics, b.metrics, record, delta_s)
            out.append(c)
    return out


#: The wire ideal's stretch (`ideal_stretch`), named as the measured one's with `ideal_` before.
IDEAL_STRETCH_KEYS = ("fraction_starved", "max_stretch", "fraction_starved_resolved", "max_stretch_resolved")


def ideal_stretch(run: Any, base: Any, resolution: float) -> dict[str, float | None]:
    """The stretch the ideals themselves have: the wire ideal of the run's policy against the
    baseline's wire ideal, on their own arrivals (sim-wire/ of each run, matched by request id),
    `ideal_fraction_starved`, `ideal_max_stretch` and their values beyond δ. What a starvation
    target can ask of a scheduler on this trace: no scheduler beats its policy's ideal there.
    Each ideal carries its own run's wire fit (`wire.py`), so the plain count also holds
    sub-millisecond differences of fit (8.9% of requests on one tocs-lan pair, 0.14% beyond
    δ): read the ideal's stretch beyond δ and its maximum. None where either run has no wire
    ideal."""
    p, b = getattr(run, "ideal_requests", None), getattr(base, "ideal_requests", None)
    if p is None or b is None:
        return {f"ideal_{k}": None for k in IDEAL_STRETCH_KEYS}
    st = analysis.stretch(p, b, resolution)
    return {f"ideal_{k}": st[k] for k in IDEAL_STRETCH_KEYS}


#: What a baseline's rerun row carries besides its point (`rerun_rows`).
RERUN_KEYS = ("fraction_starved", "max_stretch", "fraction_starved_resolved", "max_stretch_resolved",
              "median_stretch", "fraction_stretch_over_2")  # fmt: skip


def rerun_rows(runs: list[Any], reruns: list[Any], exp: Experiment) -> list[dict[str, Any]]:
    """The baseline against itself (`experiment.baseline_rerun`): per point, its rerun on the same
    trace and seed against its first run, as every arm is against it: the stretch two runs of
    one policy show by chance, the floor under every arm's `fraction_starved` and `max_stretch`
    at that point. ``mean_response_ratio`` is the first run's mean ÷ the rerun's. A point
    without its first run is left out."""
    first = {(arm_of(r), *r.key): r for r in runs}
    delta_s = resolution_s(exp)
    rows = []
    for again in reruns:
        b = first.get((arm_of(again), *again.key))
        if b is None:
            continue
        st = analysis.stretch(again.requests, b.requests, delta_s)
        rows.append(
            {"baseline": arm_of(b), "load": round(b.load, 2)}
            | ({"path": b.path} if b.path is not None else {})
            | {"repeat": b.repeat, "matched": st["matched"]}
            | {
                "mean_response_ratio": analysis.ratio(
                    b.metrics["mean_response_s"], again.metrics["mean_response_s"]
                )
            }
            | {k: st.get(k) for k in RERUN_KEYS}
            | {"valid": bool(b.metrics["valid"] and again.metrics["valid"])}
        )
    return rows


# --------------------------------------------------------------------------- tables in the summary


#: Per arm and load: averaged over repeats (max_stretch: the largest).
ARM_MEAN_KEYS = (
    "mean_response_ratio",
    "throughput_ratio",
    "link_throughput_ratio",
    "fraction_starved",
    "fraction_starved_resolved",
    "measured_over_ideal",
    "measured_over_wire_ideal",
    "ideal_fraction_starved",
    "ideal_fraction_starved_resolved",
)
#: Per arm and load: the largest over repeats.
ARM_MAX_KEYS = ("max_stretch", "max_stretch_resolved", "ideal_max_stretch", "ideal_max_stretch_resolved")


def arm_comparisons(
    runs: list[Any], comparisons: list[dict[str, Any]], exp: Experiment
) -> list[dict[str, Any]]:
    """One entry per arm and point (load, WAN path) against the weakest baseline (module doc).
    A point's value is over its valid repeats; with none valid, over all of them, ``valid:
    false``."""
    bases = baselines(exp)
    if not bases:
        return []
    base = bases[0]
    rows = []
    for arm in exp.arm_list():
        points: dict[tuple[float, str | None], list[dict[str, Any]]] = {}
        for r in runs:
            if arm_of(r) != arm.label:
                continue
            if arm.label == base:  # against itself: every request matched, none slower
                own = {"mean_response_ratio": 1.0, "throughput_ratio": 1.0, "link_throughput_ratio": 1.0,
                       "valid": r.metrics["valid"]}  # fmt: skip
                for k in IDEAL_STRETCH_KEYS:
                    own[k] = own[f"ideal_{k}"] = 0.0 if k.startswith("fraction") else 1.0
            else:
                own = next((c for c in comparisons if c["baseline"] == base and c.get("arm") == arm.label
                            and (round(c["load"], 2), c.get("path"), c["repeat"]) == r.key),
                           None)  # fmt: skip
            if own is not None:
                row = own | {"measured_over_ideal": measured_over_ideal(r.metrics),
                             "measured_over_wire_ideal": measured_over_wire_ideal(r.metrics)}  # fmt: skip
                points.setdefault((round(r.load, 2), r.path), []).append(row)
        for (load, path), every in sorted(points.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            good = [c for c in every if c["valid"]]
            cs = good or every
            rows.append(
                {"arm": arm.label, "policy": arm.policy, "scheduler": arm.scheduler, "load": load}
                | ({"path": path} if path is not None else {})
                | {"baseline": base, "ideal": _ideal(arm, exp)}
                | {k: _mean(c.get(k) for c in cs) for k in ARM_MEAN_KEYS}
                | {k: max((c[k] for c in cs if c.get(k) is not None), default=None) for k in ARM_MAX_KEYS}
                | {
                    "repeats": len(cs),
                    "valid": bool(good),
                }  # fmt: skip
            )
    return rows


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _ideal(arm: Any, exp: Experiment) -> str | None:
    """The simulator's policy `measured_over_ideal` divides by (srpt2's cutoffs are learned
    per run: named without them)."""
    if arm.policy not in models.MODELLED_POLICIES:
        return None
    if arm.policy == "srpt2":
        return "srpt-classes:<median>"
    return models.sim_policy_of(arm.policy, arm.scheduler, exp.server.cutoffs, [])


def improvement_table(comparisons: list[dict[str, Any]], rate_bits_per_s: int) -> list[dict[str, Any]]:
    """Per pair (the paper's Table 2): improvement % per load, the average and the maximum over
    the valid loads, and the paper's average and maximum. A load's value is the mean over its
    valid repeats; with none valid, over all of them, marked ``valid: false`` (shown, never
    counted in the average or the maximum)."""
    paper = PAPER_IMPROVEMENT_PCT.get(rate_bits_per_s, {})
    acc: dict[tuple[str, str, str], dict[float, tuple[list[float], list[float]]]] = {}
    for c in comparisons:
        if c.get("path") is not None or c.get("improvement_pct") is None:
            continue
        per = acc.setdefault((c["uplink"], c.get("arm", c["policy"]), c["baseline"]), {})
        good, every = per.setdefault(round(c["load"], 2), ([], []))
        every.append(c["improvement_pct"])
        if c["valid"]:
            good.append(c["improvement_pct"])
    rows = []
    for (uplink, policy, base), per in acc.items():
        by_load = [
            {"load": ld, "improvement_pct": float(np.mean(good or every)), "valid": bool(good)}
            for ld, (good, every) in sorted(per.items())
        ]
        valid = [b["improvement_pct"] for b in by_load if b["valid"]]
        p_avg, p_max = paper.get((policy, base), (None, None))
        rows.append(
            {
                "uplink": uplink,
                "policy": policy,
                "baseline": base,
                "by_load": by_load,
                "average_pct": float(np.mean(valid)) if valid else None,
                "max_pct": float(np.max(valid)) if valid else None,
                "valid_loads": len(valid),
                "paper_average_pct": p_avg,
                "paper_max_pct": p_max,
            }
        )
    return rows


def paper_targets(comparisons: list[dict[str, Any]], rate_bits_per_s: int) -> list[dict[str, Any]]:
    """The paper's closing numbers against ours at the highest load where the pair is valid
    (mean over the valid repeats there); no row for an uplink the paper did not measure. With no
    valid point, the highest load's value is still given, ``valid: false`` and ``met`` None."""
    rows = []
    for policy, base, key, op, thr, source in PAPER_TARGETS.get(rate_bits_per_s, ()):
        every = [
            c
            for c in comparisons
            if c["policy"] == policy
            and c["baseline"] == base
            and c.get("path") is None
            and c.get(key) is not None
        ]
        good = [c for c in every if c["valid"]]
        row = {"policy": policy, "baseline": base, "key": key, "target": f"{op} {thr:g}", "source": source}
        cs = good or every
        if not cs:
            rows.append(row | {"measured": None, "met": None, "valid": False})
            continue
        load = max(c["load"] for c in cs)
        vals = [c[key] for c in cs if abs(c["load"] - load) < 1e-9]
        v = float(np.mean(vals))
        met = (v >= thr if op == ">=" else v <= thr) if good else None
        rows.append(row | {"load": load, "measured": v, "met": met, "valid": bool(good), "n": len(vals)})
    return rows


def group_table(runs: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per point (load, repeat) and client group: each policy's mean response time and, per
    pair, the improvement and stretch (the paper's Table 2 and Figure 4 by group)."""
    rows: dict[tuple[float, int, str], dict[str, Any]] = {}
    for r in runs:
        if r.get("path") is not None:
            continue
        for g in r.get("groups") or []:
            row = rows.setdefault(
                (round(r["load"], 2), r["repeat"], g["name"]),
                {
                    "load": r["load"],
                    "repeat": r["repeat"],
                    "group": g["name"],
                    "rtt_ms": g["rtt_ms"],
                    "loss": g["loss"],
                    "mean_response_s": {},
                    "valid": True,
                    "pairs": {},
                },
            )
            row["mean_response_s"][r.get("arm", r["policy"])] = g["mean_response_s"]
            row["valid"] = row["valid"] and bool(r["valid"])
    for c in comparisons:
        if c.get("path") is not None:
            continue
        for g in c.get("groups") or []:
            row = rows.get((round(c["load"], 2), c["repeat"], g["name"]))
            if row is not None:
                row["pairs"][pair_name(c.get("arm", c["policy"]), c["baseline"])] = {
                    k: g[k]
                    for k in (
                        "improvement_pct",
                        "mean_response_ratio",
                        "fraction_starved",
                        "max_stretch",
                        "largest_file_stretch",
                    )
                }
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1]))]


def estimate_accuracy(runs: list[Any], out: Path) -> list[dict[str, Any]]:
    """Per srrt run (or any run whose metrics carry the srrt histogram): `srrtmetrics.accuracy`,
    or why there is none."""
    rows = []
    for r in runs:
        head = {"run": r.run, "policy": r.policy, "load": r.load, "repeat": r.repeat}
        try:
            acc = srrtmetrics.run_accuracy(out / "runs" / r.run)
        except srrtmetrics.MetricsError as e:
            if r.policy == "srrt":  # another policy's metrics are not this table's business
                rows.append(head | {"error": str(e)})
            continue
        if acc is not None:
            rows.append(head | acc)
        elif r.policy == "srrt":
            why = "server_metrics.txt missing or without the srrt series (scrape failed?)"
            rows.append(head | {"error": why})
    return rows


def extend_summary(summary: dict[str, Any], runs: list[Any], exp: Experiment, out: Path) -> None:
    """Adds the tables this module computes, each only where it has content (a LAN FAIR/SRPT
    experiment's summary keeps its keys): ``arm_comparisons`` when the experiment gives
    arms; ``group_table`` with client groups; ``improvement``
    and ``paper_targets`` when a baseline other than FAIR is compared or srrt runs;
    ``estimate_accuracy`` when a run has srrt's histogram or is an srrt run."""
    rate = exp.uplink.rate_bits_per_s
    cmps = summary["comparisons"]
    if exp.arms:
        summary["arm_comparisons"] = arm_comparisons(runs, cmps, exp)
    groups = group_table(summary["runs"], cmps)
    if groups:
        summary["group_table"] = groups
    if "srrt" in exp.policies or any(c["baseline"] != "fair" for c in cmps):
        summary["improvement"] = improvement_table(cmps, rate)
        summary["paper_targets"] = paper_targets(cmps, rate)
    acc = estimate_accuracy(runs, out)
    if acc:
        summary["estimate_accuracy"] = acc
        summary["estimate_accuracy_limits"] = srrtmetrics.LIMITS
