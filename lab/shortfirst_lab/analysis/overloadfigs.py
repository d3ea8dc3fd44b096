"""Figures of the overload results in the paper's style, written as PNG files.

- `timeline-<W>-<setup>.png`, `timeline-rho<ρ>.png` (the paper's Figs. 6, 7, 8; a persistent
  name gains `-max<N>` for a server with a connection limit and `-<T>s` where one ρ ran for
  several lengths): per run pair
  FAIR/SRPT, over time: open connections and SYN drops (server side, health.csv), and the
  mean response time and time to first byte of the requests completing each second (client
  side, series.csv);
- `workloads.png` (Fig. 12): mean response time per workload W1-W10, baseline setup;
- `setups.png` (Figs. 9, 10): mean response time of W1 per setup;
- `size-<W>-<setup>.png`, `size-rho<ρ>.png` (Fig. 8d): mean response time per request size
  (bins [x, 1.2x)), FAIR against SRPT: whether large requests pay for SRPT under overload;
- `memory-rho<ρ>.png`: the server's RSS over time and the seconds its admin endpoint did not
  answer, for persistent runs.

Only the first repeat of a point is drawn over time; the bar charts show the summary's means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import metrics as analysis
from .figures import DPI, _style
from .overload import BASELINE_SETUP, Run

POLICIES = ("fair", "srpt")


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".png.tmp")
    fig.savefig(tmp, format="png", dpi=DPI)
    plt.close(fig)
    tmp.replace(path)
    return path


def _line(ax: plt.Axes, x: Any, y: Any, policy: str) -> None:
    st = _style(policy)
    ax.plot(x, y, color=st["color"], linestyle=st["linestyle"], label=st["label"], linewidth=1.0)


def timeline(pair: dict[str, Run], title: str, path: Path) -> Path:
    """Four panels over time for FAIR and SRPT: connections, SYN drops, response time, TTFB."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), layout="constrained", sharex=True)
    (conn, drops), (rt, fb) = axes
    for policy, r in pair.items():
        h = r.health
        if not h.empty and "t_s" in h:
            if "open_connections" in h:
                _line(conn, h["t_s"], h["open_connections"], policy)
            if "listen_drops" in h and h["listen_drops"].notna().any():
                d = h["listen_drops"].ffill().fillna(0)
                _line(drops, h["t_s"], d - d.iloc[0], policy)
        s = r.series
        if len(s):
            _line(rt, s["second"] + 0.5, s["mean_response_s"], policy)
            _line(fb, s["second"] + 0.5, s["mean_ttfb_s"], policy)
    labels = (
        (conn, "Open connections at the server"),
        (drops, "SYN drops (ListenDrops, cumulative)"),
        (rt, "Mean response time (s), per second"),
        (fb, "Mean time to first byte (s), per second"),
    )
    for ax, label in labels:
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.25)
        if ax.lines:
            ax.legend(fontsize=8)
    end_s = max((r.duration_s for r in pair.values()), default=None)
    for ax, _ in labels:
        if end_s is not None:
            ax.axvline(end_s, color="grey", linewidth=0.8, linestyle=":")
    for ax in (rt, fb):
        ax.set_xlabel("Time since the load started (s)")
        if any(len(line.get_ydata()) for line in ax.lines):
            ax.set_yscale("log")
    fig.suptitle(
        f"{title}\ndotted: the schedule's end (requests still in flight drain after it)", fontsize=10
    )
    return _save(fig, path)


def per_size(pair: dict[str, Run], title: str, path: Path) -> Path:
    """Mean response time per size bin of the requests scheduled in the run's window."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for policy, r in pair.items():
        t = analysis.size_bins(r.requests)
        if t.empty:
            continue
        st = _style(policy)
        x = np.sqrt(t["size_lo"] * t["size_hi"])
        ax.plot(x, t["mean_response_s"], color=st["color"], linestyle=st["linestyle"], marker=st["marker"],
                markersize=3, label=st["label"], linewidth=1.0)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Request size (bytes), bins [x, 1.2x)")
    ax.set_ylabel("Mean response time (s)")
    ax.grid(True, which="both", alpha=0.25)
    if ax.lines:
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def bars(
    groups: list[str], values: dict[str, list[float | None]], ylabel: str, title: str, path: Path
) -> Path:
    """Grouped bars per policy (log scale): the paper's Fig. 12 layout."""
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(groups) + 2), 4.0), layout="constrained")
    x = np.arange(len(groups))
    width = 0.8 / max(1, len(values))
    for i, (policy, ys) in enumerate(values.items()):
        st = _style(policy)
        heights = [np.nan if y is None else y for y in ys]
        ax.bar(x + (i - (len(values) - 1) / 2) * width, heights, width, color=st["color"], label=st["label"])
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if any(y for ys in values.values() for y in ys if y):
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    return _save(fig, path)


def memory(runs: list[Run], title: str, path: Path) -> Path:
    """Server RSS over time (MiB) and the samples in which the admin endpoint did not answer."""
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    for r in runs:
        h = r.health
        if h.empty or "server_rss_bytes" not in h:
            continue
        _line(ax, h["t_s"], h["server_rss_bytes"] / 2**20, r.policy)
        down = h[h["admin_ok"].fillna(0) != 1] if "admin_ok" in h else h.iloc[:0]
        if len(down):
            st = _style(r.policy)
            ax.scatter(down["t_s"], np.zeros(len(down)), marker="x", color=st["color"],
                       label=f"{st['label']}: admin did not answer")  # fmt: skip
    ax.set_xlabel("Time since the load started (s)")
    ax.set_ylabel("Server RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.25)
    if ax.lines:
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def _first_repeat(runs: list[Run]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    for r in sorted(runs, key=lambda r: r.repeat):
        if r.policy in POLICIES:
            out.setdefault(r.policy, r)
    return out


def write_all(runs: list[Run], summary: dict[str, Any], figdir: Path) -> list[tuple[str, Path]]:
    """Every figure the runs support; returns (caption, path) in the order of the report."""
    figs: list[tuple[str, Path]] = []
    ws = summary["workloads"]
    base = [w for w in ws if w["setup"] == BASELINE_SETUP]
    if base:
        title = "Mean response time per workload, baseline setup (A) (paper Fig. 12)"
        vals = {p: [w.get(p, {}).get("mean_response_s") for w in base] for p in POLICIES}
        figs.append((title, bars([w["name"] for w in base], vals, "Mean response time (s)", title,
                                 figdir / "workloads.png")))  # fmt: skip
    w1 = [w for w in ws if w["name"] == "W1"]
    if len(w1) > 1:
        title = "Mean response time of W1 per setup (paper Figs. 9, 10)"
        vals = {p: [w.get(p, {}).get("mean_response_s") for w in w1] for p in POLICIES}
        figs.append((title, bars([w["setup"] for w in w1], vals, "Mean response time (s)", title,
                                 figdir / "setups.png")))  # fmt: skip
    by_point: dict[tuple[str, str], list[Run]] = {}
    lengths = run_lengths(runs)
    for r in runs:
        if r.workload is not None:
            by_point.setdefault((r.workload, r.setup or BASELINE_SETUP), []).append(r)
        elif r.rho is not None:
            by_point.setdefault((persistent_name(r, lengths), r.setup or BASELINE_SETUP), []).append(r)
    for (name, setup), rs in sorted(by_point.items()):
        persistent = name.startswith("rho")
        stem = f"timeline-{name}" + ("" if persistent and setup == BASELINE_SETUP else f"-{setup}")
        what = f"persistent overload {persistent_label(rs[0])}" if persistent else f"workload {name}"
        title = f"{what}, setup {setup}: server health and client response over time (paper Figs. 6-8)"
        pair = _first_repeat(rs)
        figs.append((title, timeline(pair, title, figdir / f"{stem}.png")))
        title = f"{what}, setup {setup}: mean response time per request size (paper Fig. 8d)"
        figs.append((title, per_size(pair, title, figdir / f"{stem.replace('timeline', 'size', 1)}.png")))
        if persistent:
            title = f"{what}, setup {setup}: server memory and admin endpoint"
            figs.append(
                (title, memory(list(_first_repeat(rs).values()), title, figdir / f"memory-{name}.png"))
            )
    return figs


def run_lengths(runs: list[Run]) -> dict[tuple[float | None, tuple[int, str]], set[float]]:
    """The run lengths of each (ρ, connection limit)."""
    out: dict[tuple[float | None, tuple[int, str]], set[float]] = {}
    for r in runs:
        out.setdefault((r.rho, r.connection_limit), set()).add(r.duration_s)
    return out


def persistent_name(r: Run, lengths: dict[tuple[float | None, tuple[int, str]], set[float]]) -> str:
    """`rho<ρ>`, then `-max<N>` for a server with a connection limit, then `-<T>s` when runs of
    that ρ and server ran for different lengths (`run_lengths`; e.g. the 30-minute memory run)."""
    name = f"rho{r.rho:g}" + (f"-max{r.connection_limit[0]}" if r.connection_limit[0] else "")
    return name + (f"-{r.duration_s:g}s" if len(lengths[(r.rho, r.connection_limit)]) > 1 else "")


def persistent_label(r: Run) -> str:
    n, mode = r.connection_limit
    return f"ρ = {r.rho:g}, {r.duration_s:g} s" + (f", at most {n} connections ({mode})" if n else "")


__all__ = ["write_all", "timeline", "bars", "memory"]
