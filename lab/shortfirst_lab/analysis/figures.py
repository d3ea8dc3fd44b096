"""Figures in the papers' style (Harchol-Balter 2003 Figs. 5, 6, 9), rendered to PNG bytes.

Every function takes already-analysed data and returns PNG bytes (matplotlib, Agg backend),
so the report can embed them and nothing here touches the experiment directory.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from . import metrics as analysis

STYLE = {
    "fair": {"color": "#c0392b", "marker": "s", "linestyle": "--", "label": "FAIR"},
    "srpt": {"color": "#1f5fa8", "marker": "o", "linestyle": "-", "label": "SRPT"},
    "srpt2": {"color": "#2e8b57", "marker": "^", "linestyle": "-.", "label": "SRPT (2 bands)"},
    "srrt": {"color": "#8e44ad", "marker": "D", "linestyle": "-", "label": "SRRT"},
    # Arms of a policy under a user-space scheduler (experiment.arms): the policy's colour family.
    "fair/user": {"color": "#e67e22", "marker": "s", "linestyle": ":", "label": "FAIR (user)"},
    "fair/crovella": {"color": "#7f4f24", "marker": "s", "linestyle": "-.", "label": "FAIR (Crovella)"},
    "srpt/user": {"color": "#17becf", "marker": "v", "linestyle": "-", "label": "SRPT (user)"},
    "srpt/crovella": {"color": "#556b2f", "marker": "P", "linestyle": "-.", "label": "SRPT (Crovella)"},
    "las/user": {"color": "#d4ac0d", "marker": "*", "linestyle": "--", "label": "LAS (user)"},
}
DPI = 110

#: The style every report page shares (report, farm, browser), in its <style> element.
PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0} td.l,th.l{text-align:left}
.bad{background:#fde2e2} .good{background:#e2f5e2}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:13px;color:#555} pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}
"""


def _style(policy: str) -> dict[str, Any]:
    return STYLE.get(policy, {"color": "grey", "marker": "x", "linestyle": ":", "label": policy.upper()})


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def _grid(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, layout="constrained"
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _panels(by_load: Mapping[float, Any]) -> tuple[plt.Figure, list[tuple[plt.Axes, float, Any]]]:
    """One panel per load, in load order: (figure, [(axes, load, that load's data)])."""
    loads = sorted(by_load)
    fig, axes = _grid(len(loads))
    return fig, [(ax, load, by_load[load]) for ax, load in zip(axes, loads, strict=True)]


def metric_vs_load(
    points: Mapping[str, Sequence[tuple[float, float | None, float | None]]],
    ylabel: str,
    title: str,
    logy: bool = False,
    xlabel: str = "Uplink load",
) -> bytes:
    """One line per policy: (x, value, 95% CI half-width or None) points; x is the load
    unless ``xlabel`` says otherwise (RTT, loss in a WAN sweep)."""
    fig, ax = plt.subplots(figsize=(5.6, 4.2), layout="constrained")
    for policy, pts in points.items():
        pts = [p for p in pts if p[1] is not None]
        if not pts:
            continue
        st = _style(policy)
        x = [p[0] for p in pts]
        y = [p[1] for p in pts]
        err = [p[2] if p[2] is not None else 0.0 for p in pts]
        ax.errorbar(
            x,
            y,
            yerr=err,
            capsize=3,
            color=st["color"],
            marker=st["marker"],
            linestyle=st["linestyle"],
            label=st["label"],
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _png(fig)


def per_group(
    by_panel: Mapping[str, Mapping[str, Sequence[tuple[str, float | None]]]],
    ylabel: str,
) -> bytes:
    """Grouped bars, one panel per key of ``by_panel`` (a load, say): in each, one bar per
    series (a policy, or a pair of policies) for each client group, in the groups' order. A
    missing value leaves its bar out; a zero line is drawn when values change sign."""
    fig, axes = _grid(len(by_panel))
    for ax, (title, series) in zip(axes, by_panel.items(), strict=True):
        groups = list(dict.fromkeys(g for pts in series.values() for g, _ in pts))
        width = 0.8 / max(1, len(series))
        for i, (name, pts) in enumerate(series.items()):
            st = STYLE.get(name, {"color": f"C{i}", "label": name})
            vals = dict(pts)
            shift = (i - (len(series) - 1) / 2) * width
            x = [k + shift for k, g in enumerate(groups) if vals.get(g) is not None]
            y = [vals[g] for g in groups if vals.get(g) is not None]
            ax.bar(x, y, width=width, color=st["color"], label=st["label"])
        ax.set_xticks(range(len(groups)), groups, fontsize=8)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig)


def per_size(
    by_load: Mapping[float, Mapping[str, pd.DataFrame]],
    kind: str,
) -> bytes:
    """Fig. 9: mean response per size percentile ("percentile") or per [x,1.2x] bin ("bin")."""
    fig, panels = _panels(by_load)
    for ax, load, per_policy in panels:
        for policy, df in per_policy.items():
            st = _style(policy)
            if kind == "percentile":
                t = analysis.percentile_buckets(df)
                ax.plot(
                    t["pct_hi"],
                    t["mean_response_s"],
                    color=st["color"],
                    linestyle=st["linestyle"],
                    label=st["label"],
                    linewidth=1.2,
                )
            else:
                t = analysis.size_bins(df)
                x = np.sqrt(t["size_lo"] * t["size_hi"])
                ax.plot(
                    x,
                    t["mean_response_s"],
                    color=st["color"],
                    linestyle=st["linestyle"],
                    marker=st["marker"],
                    markersize=3,
                    label=st["label"],
                    linewidth=1.0,
                )
        ax.set_yscale("log")
        if kind == "percentile":
            ax.set_xlabel("Percentile of request size (200 buckets of 0.5%)")
            ax.set_xlim(0, 100)
        else:
            ax.set_xscale("log")
            ax.set_xlabel("Request size (bytes), bins [x, 1.2x]")
        ax.set_ylabel("Mean response time (s)")
        ax.set_title(f"load {load:.2f}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    return _png(fig)


def ccdf(by_load: Mapping[float, Mapping[str, pd.DataFrame]]) -> bytes:
    """CCDF P[response > t] per policy, one panel per load, log-log."""
    fig, panels = _panels(by_load)
    for ax, load, per_policy in panels:
        for policy, df in per_policy.items():
            st = _style(policy)
            x, p = analysis.ccdf(df["response_s"])
            keep = p > 0
            ax.plot(x[keep], p[keep], color=st["color"], linestyle=st["linestyle"], label=st["label"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("Response time t (s)")
        ax.set_ylabel("P[response > t]")
        ax.set_title(f"load {load:.2f}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    return _png(fig)


def timeseries(
    by_load: Mapping[float, Mapping[str, pd.DataFrame]],
    column: str,
    ylabel: str,
    warmup_s: float,
) -> bytes:
    """A health column over time (e.g. open connections), one panel per load."""
    fig, panels = _panels(by_load)
    for ax, load, per_policy in panels:
        for policy, h in per_policy.items():
            if h.empty or column not in h:
                continue
            st = _style(policy)
            ax.plot(
                h["t_s"],
                h[column],
                color=st["color"],
                linestyle=st["linestyle"],
                label=st["label"],
                linewidth=1.0,
            )
        ax.axvline(warmup_s, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel("Time since run start (s); dotted: end of warm-up")
        ax.set_ylabel(ylabel)
        ax.set_title(f"load {load:.2f}")
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=8)
    return _png(fig)


def baseline(b: analysis.Baseline, size_bytes: Any, response_s: Any) -> bytes:
    """Calibration: every idle fetch, the per-size medians and the fitted line (log-log)."""
    fig, ax = plt.subplots(figsize=(5.6, 4.2), layout="constrained")
    ax.scatter(size_bytes, response_s, s=8, color="#999999", label="idle fetches")
    ax.scatter(b.sizes_bytes, b.median_s, s=22, color="#1f5fa8", label="median per size")
    xs = np.geomspace(max(1, min(b.sizes_bytes)), max(b.sizes_bytes), 200)
    ax.plot(xs, b.predict(xs), color="#1f5fa8", label="baseline used (interpolated medians)")
    ax.plot(
        xs,
        b.line(xs),
        color="#c0392b",
        linestyle="--",
        label=f"line: a={b.a_s * 1000:.2f} ms, rate_eff={b.rate_eff_bits_per_s / 1e6:.2f} Mbit/s",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Request size (bytes)")
    ax.set_ylabel("Response time alone (s)")
    ax.set_title("Idle baseline (calibration)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    return _png(fig)


def measured_vs_models(
    series: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
) -> bytes:
    """Mean response vs load per policy: measured (solid), simulated (dashed), M/G/1 (dotted).

    `series[policy][kind]` with kind one of measured, simulated, analytic, analytic SRPT.
    """
    kinds = {
        "measured": ("-", "o"),
        "simulated": ("--", "s"),
        "analytic": (":", "^"),
        "analytic SRPT": ((0, (1, 3)), "v"),
    }
    fig, ax = plt.subplots(figsize=(6.4, 4.6), layout="constrained")
    for policy, by_kind in series.items():
        st = _style(policy)
        for kind, pts in by_kind.items():
            if not pts:
                continue
            ls, mk = kinds[kind]
            ideal = kind == "analytic SRPT"
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                color="k" if ideal else st["color"],
                linestyle=ls,
                marker=mk,
                markersize=4,
                label="ideal SRPT (M/G/1)" if ideal else f"{st['label']} {kind}",
            )
    ax.set_yscale("log")
    ax.set_xlabel("Uplink load")
    ax.set_ylabel("Mean response time (s)")
    ax.set_title("Measured vs simulated vs analytic")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7)
    return _png(fig)


def measured_beside_simulated(runs: Sequence[Mapping[str, Any]]) -> bytes:
    """A farm's mean response per arm, one panel per load: measured bars beside simulated.

    `runs`: the farm summary's rows (`arm`, `load`, `measured`/`simulated` metrics)."""
    loads = sorted({r["load"] for r in runs})
    fig, axes = _grid(len(loads))
    for ax, load in zip(axes, loads, strict=True):
        at = [r for r in runs if r["load"] == load]
        x = np.arange(len(at))
        meas = [r["measured"]["mean_response_s"] or 0.0 for r in at]
        sim = [(r["simulated"] or {}).get("mean_response_s") or 0.0 for r in at]
        ax.bar(x - 0.2, meas, 0.4, color="#1f5fa8", label="measured")
        ax.bar(x + 0.2, sim, 0.4, color="#bbbbbb", label="simulated")
        ax.set_xticks(x, [r["arm"] for r in at], rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("Mean response time (s)")
        ax.set_title(f"load {load:g} per host")
        ax.grid(True, axis="y", alpha=0.25)
        ax.legend(fontsize=7)
    return _png(fig)
