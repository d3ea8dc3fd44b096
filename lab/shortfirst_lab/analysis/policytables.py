"""The page of :mod:`policycmp`'s summary: its tables (title, note, header, rows) and the
per-group figures, for the report. Everything here reads ``summary.json``'s keys only."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import figures


def _f(x: Any, fmt: str) -> str:
    return "—" if x is None else fmt.format(x)


def _imp_cell(by_load: list[dict[str, Any]], load: float) -> str:
    b = next((b for b in by_load if b["load"] == load), None)
    if b is None:
        return "—"
    return f"{b['improvement_pct']:.1f}" + ("" if b["valid"] else "*")


def _bounded(v: Any, bounds: list[Any] | None, fmt: str) -> str:
    lo, hi = bounds or (None, None)
    if v is None:
        return f"> {lo:g}" if lo is not None else "—"
    return fmt.format(v) + f" [{lo:g}, {_f(hi, '{:g}')}]"


def tables(summary: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, header, rows) of this module's tables, for the report page."""
    out = []
    imp = summary.get("improvement") or []
    if imp:
        loads = sorted({b["load"] for r in imp for b in r["by_load"]})
        rows = [
            [r["uplink"], f"{r['policy']} vs {r['baseline']}"]
            + [_imp_cell(r["by_load"], ld) for ld in loads]
            + [
                _f(r["average_pct"], "{:.1f}"),
                _f(r["max_pct"], "{:.1f}"),
                _f(r["paper_average_pct"], "{:.1f}"),
                _f(r["paper_max_pct"], "{:.1f}"),
            ]
            for r in imp
        ]
        out.append(
            (
                "Improvement of each policy over its baselines (cf. Al-Sadeh and Yahya 2008, Table 2)",
                "Improvement % = 100 · (1 − policy's mean response ÷ baseline's), same trace; per load "
                "over the valid repeats (* : no valid pair at that load, the mean of the invalid ones); "
                "average and max over the valid loads only.",
                ["uplink", "pair", *(f"load {ld:g}" for ld in loads)]
                + ["average", "max", "paper avg", "paper max"],
                rows,
            )
        )
    tgt = summary.get("paper_targets") or []
    if tgt:
        rows = [
            [
                f"{t['policy']} vs {t['baseline']}",
                t["key"],
                t["target"],
                _f(t.get("load"), "{:g}"),
                _f(t["measured"], "{:.4g}") + ("" if t.get("valid", True) else " (invalid)"),
                "—" if t["met"] is None else ("yes" if t["met"] else "NO"),
                t["source"],
            ]
            for t in tgt
        ]
        out.append(
            (
                "The SRRT paper's closing numbers against ours",
                "At the highest load where the pair's runs are valid (mean over repeats).",
                ["pair", "metric", "target", "load", "measured", "met", "source"],
                rows,
            )
        )
    return (
        _arm_table(summary)
        + _rerun_table(summary)
        + out
        + _stretch_table(summary)
        + _group_tables(summary.get("group_table") or [])
        + _accuracy_table(summary)
    )


def _arm_table(summary: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    rows_in = summary.get("arm_comparisons") or []
    if not rows_in:
        return []
    rows = [
        [f"{r['load']:.2f}" + (f" {r['path']}" if r.get("path") else ""), r["arm"], r["scheduler"]]
        + [_f(r["mean_response_ratio"], "{:.2f}"), _f(r["throughput_ratio"], "{:.3f}")]
        + [_f(r.get("link_throughput_ratio"), "{:.3f}")]
        + [_f(r["fraction_starved"], "{:.4f}"), _f(r["max_stretch"], "{:.2f}")]
        + [_f(r.get("fraction_starved_resolved"), "{:.4f}"), _f(r.get("max_stretch_resolved"), "{:.2f}")]
        + [_f(r.get("ideal_fraction_starved"), "{:.4f}"), _f(r.get("ideal_max_stretch"), "{:.2f}")]
        + [_f(r["measured_over_ideal"], "{:.2f}"), _f(r.get("measured_over_wire_ideal"), "{:.2f}")]
        + [r["ideal"] or "—", str(r["repeats"])]
        + ["yes" if r["valid"] else "NO"]
        for r in rows_in
    ]
    base = rows_in[0]["baseline"]
    head = ["load", "arm", "scheduler", f"{base} ÷ arm mean RT", f"throughput ÷ {base}"]
    head += [f"link bytes ÷ {base}", "S > 1", "max S", "slower by > δ", "max RT ÷ (RT_base + δ)"]
    head += ["wire ideal: S > 1", "wire ideal: max S"]
    head += ["measured ÷ ideal", "measured ÷ wire ideal", "ideal (simulator)", "repeats", "valid"]
    note = (
        f"Each arm (policy/scheduler) against {base} on the same trace and seed, repeats averaged (max S: "
        "the largest). S(r) = RT_arm(r) ÷ RT_baseline(r) per request; δ is the stretch resolution (one "
        "segment's time on the uplink, at least 1 ms): below it two runs of one policy differ anyway. "
        "Wire ideal: S of the arm's wire ideal against the baseline's on the same trace, the stretch the "
        "policy itself has there, whoever schedules it. "
        "Measured ÷ ideal: the arm's mean "
        "response ÷ the simulator's on the run's own arrivals under the policy the arm runs (ps for FAIR, "
        "the server's size classes for SRPT in the kernel, exact SRPT in user space), each request served "
        "for its body size; measured ÷ wire ideal: the same with each request's wire cost (head, segment "
        "headers, connection control bytes, fitted to the uplink's byte count), the honest ideal: the best "
        "any scheduler could do on this link. Throughput spreads "
        "each response's bytes from its first byte to its last; link bytes are the uplink's own count in "
        "the window."
    )
    return [("Arms: each policy and scheduler against the baseline", note, head, rows)]


def _rerun_table(summary: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    rows_in = summary.get("baseline_reruns") or []
    if not rows_in:
        return []
    rows = [
        [f"{r['load']:.2f}" + (f" {r['path']}" if r.get("path") else ""), str(r["repeat"]), r["baseline"]]
        + [_f(r["mean_response_ratio"], "{:.3f}"), _f(r["fraction_starved"], "{:.4f}")]
        + [_f(r["max_stretch"], "{:.2f}"), _f(r["fraction_starved_resolved"], "{:.4f}")]
        + [_f(r["max_stretch_resolved"], "{:.2f}"), "yes" if r["valid"] else "NO"]
        for r in rows_in
    ]
    head = ["load", "rep", "baseline", "first ÷ rerun mean RT", "S > 1", "max S", "slower by > δ"]
    head += ["max RT ÷ (RT_first + δ)", "valid"]
    note = (
        "The baseline run twice on the same trace and seed (experiment.baseline_rerun), its rerun "
        "against its first run as every arm is against it: what the stretch shows when nothing but "
        "chance differs, the floor under each arm's figures at that point."
    )
    return [("The baseline against itself", note, head, rows)]


def _stretch_table(summary: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    cmps = [c for c in summary["comparisons"] if c.get("median_stretch") is not None]
    if not (summary.get("improvement") and cmps):
        return []
    rows = [
        [f"{c['load']:.2f}" + (f" {c['path']}" if c.get("path") else ""), str(c["repeat"])]
        + [f"{c.get('arm', c['policy'])} vs {c['baseline']}", _f(c["fraction_starved"], "{:.4f}")]
        + [_f(c.get(k), "{:.4f}") for k in ("fraction_stretch_over_1_25", "fraction_stretch_over_2")]
        + [_f(c.get(k), "{:.2f}") for k in ("median_stretch", "max_stretch", "largest_file_stretch")]
        + ["yes" if c["valid"] else "NO"]
        for c in cmps
    ]
    head = [
        "load",
        "rep",
        "pair",
        "S > 1",
        "S > 1.25",
        "S > 2",
        "median S",
        "max S",
        "largest file S",
        "valid",
    ]
    note = (
        "S(r) = RT_policy(r) ÷ RT_baseline(r) per request on the same trace. On lossy, jittery paths a "
        "request's time varies between runs whatever the policy, so S > 1 also counts that noise: the "
        "fractions above 1.25 and 2, and a low load where the policies barely differ, show its size."
    )
    return [("Starvation stretch: how far S spreads", note, head, rows)]


def _accuracy_table(summary: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    out = []
    acc = summary.get("estimate_accuracy") or []
    if acc:
        rows = []
        for a in acc:
            if "error" in a:
                rows.append([a["run"], a["error"], *([""] * 9)])
                continue
            bc = a.get("band_changes", {})
            rows.append(
                [
                    a["run"],
                    str(a["responses"]),
                    _bounded(a.get("p50_ratio"), a.get("p50_ratio_bounds"), "{:.2f}"),
                    _bounded(a.get("p90_error_factor"), a.get("p90_error_factor_bounds"), "{:.2f}"),
                    _f(a.get("within_factor_1.25"), "{:.3f}"),
                    _f(a.get("within_factor_2"), "{:.3f}"),
                    _f(a.get("fraction_underestimated"), "{:.3f}"),
                    _f(a.get("ratio_of_sums"), "{:.2f}"),
                    _f(a.get("tcp_info_reads_per_response"), "{:.2f}"),
                    " / ".join(str(bc.get(k, "—")) for k in ("start", "drain", "tcp_state")),
                    _f(a.get("demotions_held"), "{}"),
                ]
            )
        out.append(
            (
                "How well srrt's estimate predicted the response time",
                "Ratio = estimated at the response's start ÷ measured; error factor = max(ratio, 1/ratio); "
                "quantiles with their bucket [bounds]. " + summary.get("estimate_accuracy_limits", ""),
                [
                    "run",
                    "responses",
                    "median ratio",
                    "p90 error factor",
                    "within 1.25×",
                    "within 2×",
                    "underestimated",
                    "Σest ÷ Σmeas",
                    "TCP_INFO reads / response",
                    "band changes start / drain / tcp_state",
                    "demotions held",
                ],
                rows,
            )
        )
    return out


def _group_tables(rows_in: list[dict[str, Any]]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    if not rows_in:
        return []
    policies = list(dict.fromkeys(p for r in rows_in for p in r["mean_response_s"]))
    names = list(dict.fromkeys(n for r in rows_in for n in r["pairs"]))
    means, stretches = [], []
    for r in rows_in:
        head = [f"{r['load']:.2f}", str(r["repeat"]), r["group"]]
        lead = [*head, f"{r['rtt_ms']:g}", f"{r['loss']:.3f}"]
        pr = r["pairs"]
        means.append(
            lead
            + [_f(r["mean_response_s"].get(p), "{:.4f}") for p in policies]
            + [_f(pr.get(n, {}).get("improvement_pct"), "{:.1f}") for n in names]
            + ["yes" if r["valid"] else "NO"]
        )
        stretches.append(
            head
            + [
                " / ".join(
                    _f(pr.get(n, {}).get(k), fmt)
                    for k, fmt in (
                        ("fraction_starved", "{:.4f}"),
                        ("max_stretch", "{:.2f}"),
                        ("largest_file_stretch", "{:.2f}"),
                    )
                )
                for n in names
            ]
        )
    return [
        (
            "Mean response time and improvement per client group "
            "(cf. Al-Sadeh and Yahya 2008, Table 2, Fig. 4)",
            "Mean response time (s) per policy over the group's requests in the window; improvement % = "
            "100 · (1 − policy ÷ baseline) per pair.",
            ["load", "rep", "group", "RTT ms", "loss", *(f"{p} RT (s)" for p in policies)]
            + [*(f"{n} %" for n in names), "valid"],
            means,
        ),
        (
            "Starvation stretch per client group",
            "Per pair: fraction of the group's requests with S > 1 / max S / largest file's S, "
            "S(r) = RT_policy(r) ÷ RT_baseline(r).",
            ["load", "rep", "group", *names],
            stretches,
        ),
    ]


def group_figures(summary: dict[str, Any]) -> list[tuple[str, str, bytes]]:
    """Mean response time per group per policy at each load; the average improvement per group
    over the valid loads per pair (the paper's Figure 4; over every load, said so in the caption,
    when no point is valid). Repeats are averaged."""
    rows = summary.get("group_table") or []
    if not rows:
        return []
    means: dict[str, dict[str, dict[str, list[float]]]] = {}
    imp: dict[str, dict[str, list[float]]] = {}
    any_valid = any(r["valid"] for r in rows)
    for r in rows:
        group = f"{r['group']}\n{r['rtt_ms']:g} ms, {100 * r['loss']:g}%"
        panel = means.setdefault(f"load {r['load']:g}", {})
        for p, v in r["mean_response_s"].items():
            if v is not None:
                panel.setdefault(p, {}).setdefault(group, []).append(v)
        if any_valid and not r["valid"]:
            continue
        for n, pr in r["pairs"].items():
            if pr.get("improvement_pct") is not None:
                label = n.upper().replace("_VS_", " vs ")
                imp.setdefault(label, {}).setdefault(group, []).append(pr["improvement_pct"])

    def avg(d: dict[str, list[float]]) -> list[tuple[str, float | None]]:
        return [(g, float(np.mean(v))) for g, v in d.items()]

    out = [
        (
            "Mean response time per client group and policy, at each load",
            "One bar per policy; the group's requests in the measurement window (repeats averaged).",
            figures.per_group(
                {k: {p: avg(d) for p, d in v.items()} for k, v in means.items()}, "Mean response time (s)"
            ),
        )
    ]
    if imp:
        out.append(
            (
                "Average improvement per client group over the valid loads "
                "(cf. Al-Sadeh and Yahya 2008, Fig. 4)",
                "100 · (1 − policy ÷ baseline) of the group's mean response time, averaged over the loads "
                + (
                    "where both runs are valid."
                    if any_valid
                    else "— NO VALID POINT: every load is averaged, all of them invalid."
                ),
                figures.per_group(
                    {
                        "all valid loads" if any_valid else "all loads (none valid)": {
                            n: avg(d) for n, d in imp.items()
                        }
                    },
                    "Improvement (%)",
                ),
            )
        )
    return out
