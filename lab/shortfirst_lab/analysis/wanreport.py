"""The WAN part of a report: response times per client group (from groups.json
and requests.csv) and, for a path sweep, SRPT against FAIR as the RTT and the
loss grow (cf. Harchol-Balter 2003, Figures 10-12).

Everything here is computed from a run's raw files; :mod:`report` calls it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import figures
from . import metrics as analysis


def group_metrics(w: pd.DataFrame, groups: dict[str, Any]) -> list[dict[str, Any]]:
    """Per group, over the measurement window ``w``: requests, completed, mean and p99
    response time, mean time to first byte, the largest 1%'s mean; beside the configured
    and the measured RTT and loss."""
    out = []
    for g in groups["groups"]:
        mine = w[w["client"].isin(g["clients"])]
        ok = mine[mine["response_s"].notna()]
        rt = ok["response_s"].to_numpy()
        ttfb = (ok["first_byte_s"] - ok["start_s"]).dropna().to_numpy()
        top = analysis.largest_fraction(ok, 0.01)
        measured = g.get("measured", {})
        out.append(
            {
                "name": g["name"],
                "rtt_ms": g["rtt_ms"],
                "jitter_ms": g["jitter_ms"],
                "loss": g["loss"],
                "measured_rtt_ms": measured.get("rtt_ms"),
                "measured_loss_down": measured.get("loss_down"),
                "measured_loss_up": measured.get("loss_up"),
                "requests": int(len(mine)),
                "completed": int(len(ok)),
                "mean_response_s": float(rt.mean()) if rt.size else None,
                "p99_response_s": float(np.percentile(rt, 99)) if rt.size else None,
                "mean_ttfb_s": float(ttfb.mean()) if ttfb.size else None,
                "largest_1pct_mean_response_s": float(top["response_s"].mean()) if len(top) else None,
            }
        )
    return out


def compare_groups(policy: list[dict[str, Any]], fair: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group: FAIR's mean response ÷ the policy's (higher is better)."""
    by_name = {g["name"]: g for g in fair}
    out = []
    for g in policy:
        f = by_name.get(g["name"])
        if f is None:
            continue
        ratio = None
        if g["mean_response_s"] and f["mean_response_s"] is not None:
            ratio = f["mean_response_s"] / g["mean_response_s"]
        out.append({"name": g["name"], "mean_response_ratio": ratio})
    return out


def _fmt(x: Any, fmt: str) -> str:
    return "—" if x is None else fmt.format(x)


Table = tuple[str, str, list[str], list[list[str]]]


def tables(summary: dict[str, Any]) -> list[Table]:
    """(title, note, header, rows) for the report's WAN tables (none for a LAN experiment)."""
    return [t for t in (_group_table(summary), _sweep_table(summary)) if t is not None]


def _group_table(summary: dict[str, Any]) -> Table | None:
    """Per run and client group: the path configured and measured, and the response times."""
    rows = [_group_row(r["run"], g) for r in summary["runs"] for g in r.get("groups") or []]
    if not rows:
        return None
    return (
        "Client groups",
        "RTT: configured / measured (median handshake RTT, tcpi_rtt, of TCP connects from "
        "the group's address, server idle, before the load). Loss: configured / measured "
        "down, up (the emulator's random drops over packets read, per direction). "
        "Response times over the measurement window.",
        [
            "run",
            "group",
            "RTT ms",
            "loss",
            "completed",
            "mean RT (s)",
            "mean TTFB (s)",
            "p99 RT (s)",
            "largest 1% RT (s)",
        ],  # fmt: skip
        rows,
    )


def _group_row(run: str, g: dict[str, Any]) -> list[str]:
    return [
        run,
        g["name"],
        _fmt(g["rtt_ms"], "{:g}") + " / " + _fmt(g["measured_rtt_ms"], "{:.1f}"),
        _fmt(g["loss"], "{:.3f}")
        + " / "
        + _fmt(g["measured_loss_down"], "{:.4f}")
        + ", "
        + _fmt(g["measured_loss_up"], "{:.4f}"),
        str(g["completed"]) + " of " + str(g["requests"]),
        _fmt(g["mean_response_s"], "{:.4f}"),
        _fmt(g["mean_ttfb_s"], "{:.4f}"),
        _fmt(g["p99_response_s"], "{:.3f}"),
        _fmt(g["largest_1pct_mean_response_s"], "{:.3f}"),
    ]


def _sweep_table(summary: dict[str, Any]) -> Table | None:
    """A path sweep's comparisons, by load, loss and RTT."""
    sweep = [c for c in summary["comparisons"] if "path" in c]
    if not sweep:
        return None
    ordered = sorted(sweep, key=lambda c: (c["load"], c["loss"], c["rtt_ms"], c.get("arm", c["policy"])))
    return (
        "SRPT against FAIR on each WAN path (cf. Harchol-Balter 2003, Figures 10-12)",
        "Mean response ratio: FAIR ÷ policy; throughput, largest-1% and largest-file ratios: policy ÷ FAIR.",
        [
            "load",
            "RTT ms",
            "loss",
            "policy",
            "mean RT ratio",
            "throughput ratio",
            "largest 1% ratio",
            "largest file ratio",
            "valid",
        ],  # fmt: skip
        [_sweep_row(c) for c in ordered],
    )


def _sweep_row(c: dict[str, Any]) -> list[str]:
    return [
        f"{c['load']:.2f}",
        _fmt(c["rtt_ms"], "{:g}"),
        _fmt(c["loss"], "{:.3f}"),
        # Against FAIR unless it says (srrt also meets srpt).
        c.get("arm", c["policy"]) + ("" if c.get("baseline", "fair") == "fair" else f" vs {c['baseline']}"),
        _fmt(c["mean_response_ratio"], "{:.2f}"),
        _fmt(c["throughput_ratio"], "{:.3f}"),
        _fmt(c["largest_1pct_ratio"], "{:.3f}"),
        _fmt(c.get("largest_file_ratio"), "{:.3f}"),
        "yes" if c["valid"] else "NO",
    ]


def sweep_figures(summary: dict[str, Any]) -> list[tuple[str, str, bytes]]:
    """Mean response time against the RTT (no loss) and against the loss (RTT 0), one
    figure per load, FAIR and SRPT (the paper's Figures 10 and 11)."""
    runs = [r for r in summary["runs"] if r.get("path") is not None]
    if not runs:
        return []
    out = []
    for load in sorted({round(r["load"], 2) for r in runs}):
        at = [r for r in runs if round(r["load"], 2) == load]
        for axis, other, label, title in (
            ("rtt_ms", "loss", "RTT (ms)", "Fig. 10"),
            ("loss", "rtt_ms", "Loss probability per packet", "Fig. 11"),
        ):
            pts: dict[str, list[tuple[float, float | None, None]]] = {}
            for r in sorted(at, key=lambda r: r[axis]):
                if r[other]:
                    continue
                # Per arm where the experiment gives arms (srpt and srpt/user are two lines).
                pts.setdefault(r.get("arm", r["policy"]), []).append((r[axis], r["mean_response_s"], None))
            if sum(len(v) for v in pts.values()) < 2:
                continue
            png = figures.metric_vs_load(pts, "Mean response time (s)", f"Load {load:g}", xlabel=label)
            out.append(
                (
                    f"Mean response time vs {label.split(' (')[0].lower()} at load {load:g} "
                    f"(cf. Harchol-Balter 2003 {title})",
                    "Other path property held at 0; one run per point, window after the warm-up.",
                    png,
                )
            )
    return out


def read_groups(run_dir: Path) -> dict[str, Any] | None:
    """A run's `groups.json` (written by the runner's `wanrun.write_groups`), or None."""
    p = run_dir / "groups.json"
    return json.loads(p.read_text()) if p.exists() else None
