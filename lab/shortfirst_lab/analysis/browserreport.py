"""A browser experiment's `summary.json` and `report.html`, from its raw logs alone.

Inputs (written by `runners.browser`, never modified here)::

    DIR/experiment.toml                  the browser experiment as run
    DIR/runs/<cell>/pageloads.jsonl      one line per page load: the browser's own figures (the
                                         warm-up loads, `"warmup": true`, are left out)
    DIR/runs/<cell>/requests.csv, received.csv   the background's logs (not in idle cells)
    DIR/runs/<cell>/run.json             the runner's record (status, server, protocol, load)

Per cell and page: the loads that ended and failed, and the median, mean and 90th percentile
of each page metric — the HTML's response end, first contentful paint, largest contentful
paint, the load event — in ms from the navigation's start. A load whose protocol is not the
cell's (the browser fell back) is counted apart and left out. Per cell, the background's
`metrics.run_metrics` over [warmup, duration] (mean response time, largest 1%, throughput).

The idle floor of a page and protocol is the smallest median load event of any server on the
idle link. Per page, protocol and load, each SRPT arm (`serve --policy srpt`, user pacer or
kernel bands) is set against it and against every other server: `floor_ratio` = its median
load event ÷ the floor (target ≤ 1.25 up to load 0.8), `speedup_vs_<server>` = that server's
median ÷ SRPT's (target ≥ 2.5 at load 0.8 against every peer and against FAIR under the
kernel), and the background under SRPT against FAIR under the same scheduler: throughput
SRPT ÷ FAIR (target ≥ 0.99) and largest 1% mean response SRPT ÷ FAIR (target ≤ 1.2).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from ..kit import LabError, write_atomic, write_json
from ..spec.browser import BrowserExperiment, BrowserRun
from ..spec.reader import read_spec
from . import figures
from . import metrics as analysis

#: The page metrics, in the order the report shows them.
PAGE_METRICS = ("load_event_ms", "lcp_ms", "fcp_ms", "response_end_ms")
#: The targets: (loads they apply to, key, op, threshold, which comparisons).
FLOOR_RATIO_MAX = 1.25
FLOOR_LOAD_MAX = 0.8
SPEEDUP_LOAD = 0.8
SPEEDUP_MIN = 2.5
THROUGHPUT_RATIO_MIN = 0.99
LARGEST_1PCT_RATIO_MAX = 1.2
#: Most page-load lines read from one cell (`browser.loads_per_cell` × pages is far less).
MAX_LOAD_LINES = 100_000


class BrowserReportError(LabError, RuntimeError):
    """A browser experiment directory without anything to report, or a malformed log."""


def read_loads(path: Path) -> list[dict[str, Any]]:
    """The lines of a pageloads.jsonl (at most MAX_LOAD_LINES), or BrowserReportError naming the line."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if n > MAX_LOAD_LINES:
                raise BrowserReportError(f"{path}: more than {MAX_LOAD_LINES} lines")
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BrowserReportError(f"{path}:{n}: not JSON ({e})") from e
    return rows


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "mean": None, "p90": None, "p25": None, "p75": None}
    a = np.asarray(values, dtype=float)
    return {
        "median": float(np.median(a)),
        "mean": float(a.mean()),
        "p90": float(np.percentile(a, 90)),
        "p25": float(np.percentile(a, 25)),
        "p75": float(np.percentile(a, 75)),
    }


def page_rows(loads: list[dict[str, Any]], protocol: str) -> dict[str, dict[str, Any]]:
    """Per page: loads ended, failed and on another protocol; each metric's statistics."""
    want = {"h1": "http/1.1", "h2": "h2"}[protocol]
    loads = [r for r in loads if not r.get("warmup")]
    out: dict[str, dict[str, Any]] = {}
    for page in dict.fromkeys(r["page"] for r in loads):
        mine = [r for r in loads if r["page"] == page]
        ok = [r for r in mine if "error" not in r and r.get("protocol") == want]
        row: dict[str, Any] = {
            "loads": len(ok),
            "failed": sum(1 for r in mine if "error" in r),
            "other_protocol": sum(1 for r in mine if "error" not in r and r.get("protocol") != want),
            "page_bytes": int(np.median([_page_bytes(r) for r in ok])) if ok else None,
        }
        for m in PAGE_METRICS:
            row[m] = _stats([float(r[m]) for r in ok if r.get(m) is not None])
        out[page] = row
    return out


def _page_bytes(r: dict[str, Any]) -> int:
    return int(r.get("html_bytes") or 0) + sum(int(x.get("body_bytes") or 0) for x in r.get("resources", []))


def analyse_cell(out: Path, b: BrowserExperiment, run: BrowserRun) -> dict[str, Any] | None:
    rdir = out / "runs" / run.run_id
    if not (rdir / "pageloads.jsonl").exists():
        return None
    rec = json.loads((rdir / "run.json").read_text()) if (rdir / "run.json").exists() else {}
    row: dict[str, Any] = {
        "run": run.run_id,
        "server": run.server_label,
        "protocol": run.protocol,
        "load": run.load,
        "status": rec.get("status", "unknown"),
        "pages": page_rows(read_loads(rdir / "pageloads.jsonl"), run.protocol),
        "background": None,
    }
    if run.load and (rdir / "requests.csv").exists():
        df = analysis.read_requests(rdir / "requests.csv")
        bg = analysis.run_metrics(df, b.exp.run.warmup_s, b.exp.run.duration_s, None,
                                  analysis.read_received(rdir / "received.csv"))  # fmt: skip
        row["background"] = {k: bg[k] for k in ("requests", "completed", "failed", "mean_response_s",
                                                "p99_response_s", "largest_1pct_mean_response_s",
                                                "throughput_bytes_per_s")}  # fmt: skip
    return row


def _median(row: dict[str, Any] | None, page: str) -> float | None:
    if row is None or page not in row["pages"]:
        return None
    return row["pages"][page]["load_event_ms"]["median"]


def comparisons(rows: list[dict[str, Any]], pages: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each SRPT arm against the idle floor, every other server and FAIR's background."""
    at = {(r["server"], r["protocol"], r["load"]): r for r in rows}
    out = []
    for r in rows:
        if not r["server"].startswith("srpt"):
            continue
        fair_label = r["server"].replace("srpt", "fair", 1)
        for page in pages:
            mine = _median(r, page)
            idle = [_median(x, page) for x in rows if x["load"] == 0 and x["protocol"] == r["protocol"]]
            floor = min((v for v in idle if v is not None), default=None)
            c: dict[str, Any] = {
                "server": r["server"], "protocol": r["protocol"], "load": r["load"], "page": page,
                "median_load_event_ms": mine, "floor_ms": floor, "floor_ratio": analysis.ratio(mine, floor),
                "speedups": {},
            }  # fmt: skip
            for x in rows:
                if x["protocol"] == r["protocol"] and x["load"] == r["load"] and x["server"] != r["server"]:
                    c["speedups"][x["server"]] = analysis.ratio(_median(x, page), mine)
            fair = at.get((fair_label, r["protocol"], r["load"]))
            mbg, fbg = r["background"], fair["background"] if fair else None
            c["background_throughput_ratio_vs_fair"] = (
                analysis.ratio(mbg["throughput_bytes_per_s"], fbg["throughput_bytes_per_s"])
                if mbg and fbg
                else None
            )
            c["background_largest_1pct_ratio_vs_fair"] = (
                analysis.ratio(mbg["largest_1pct_mean_response_s"], fbg["largest_1pct_mean_response_s"])
                if mbg and fbg else None
            )  # fmt: skip
            out.append(c)
    return out


def target_rows(comps: list[dict[str, Any]], peers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every target of the issue, each with what was measured and whether it is met."""
    rows = []

    def add(c: dict[str, Any], what: str, target: str, value: float | None, met: bool | None) -> None:
        rows.append({"server": c["server"], "protocol": c["protocol"], "load": c["load"], "page": c["page"],
                     "key": what, "target": target, "measured": value, "met": met})  # fmt: skip

    for c in comps:
        if 0 < c["load"] <= FLOOR_LOAD_MAX:
            v = c["floor_ratio"]
            add(c, "median load event ÷ idle floor", f"<= {FLOOR_RATIO_MAX}", v,
                None if v is None else v <= FLOOR_RATIO_MAX)  # fmt: skip
        if c["load"] == SPEEDUP_LOAD:
            for other in (*peers, "fair"):
                v = c["speedups"].get(other)
                add(c, f"speedup vs {other}", f">= {SPEEDUP_MIN}", v, None if v is None else v >= SPEEDUP_MIN)
            v = c["background_throughput_ratio_vs_fair"]
            add(c, "background throughput ÷ FAIR's", f">= {THROUGHPUT_RATIO_MIN}", v,
                None if v is None else v >= THROUGHPUT_RATIO_MIN)  # fmt: skip
            v = c["background_largest_1pct_ratio_vs_fair"]
            add(c, "background largest 1% ÷ FAIR's", f"<= {LARGEST_1PCT_RATIO_MAX}", v,
                None if v is None else v <= LARGEST_1PCT_RATIO_MAX)  # fmt: skip
    return rows


def summarise(out: Path) -> tuple[dict[str, Any], BrowserExperiment]:
    spec = read_spec(out / "experiment.toml", kind="browser")
    b: BrowserExperiment = spec.value
    rows, missing = [], []
    for run in b.matrix():
        row = analyse_cell(out, b, run)
        if row is None:
            missing.append(run.run_id)
        else:
            rows.append(row)
    prov = out / "provenance.json"
    comps = comparisons(rows, b.pages)
    summary = {
        "experiment": b.name,
        "rate_bits_per_s": b.exp.uplink.rate_bits_per_s,
        "pages": list(b.pages),
        "cells": rows,
        "missing": missing,
        "comparisons": comps,
        "targets": target_rows(comps, b.peers),
        "provenance": json.loads(prov.read_text()) if prov.exists() else {},
    }
    return analysis.json_safe(summary), b


def build(out: str | Path, with_figures: bool = True) -> dict[str, Any]:
    """Writes DIR/summary.json and DIR/report.html; returns the summary."""
    out = Path(out)
    summary, b = summarise(out)
    if not summary["cells"]:
        raise BrowserReportError(
            f"{out}: no cell has its page loads (runs/*/pageloads.jsonl): nothing to report"
        )
    write_json(out / "summary.json", summary)
    write_atomic(out / "report.html", render_html(summary, b, with_figures))
    return summary


def figure(summary: dict[str, Any], page: str, metric: str) -> bytes:
    """Grouped bars: per load, each cell's median `metric` for `page`, the quartiles as whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    cells = [c for c in summary["cells"] if page in c["pages"]]
    loads = sorted({c["load"] for c in cells})
    arms = list(dict.fromkeys(f"{c['server']} {c['protocol']}" for c in cells))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(loads) * (1 + len(arms) / 4)), 4.0))
    width = 0.8 / max(1, len(arms))
    for k, arm in enumerate(arms):
        xs, ys, lo, hi = [], [], [], []
        for i, ld in enumerate(loads):
            c = next((c for c in cells if f"{c['server']} {c['protocol']}" == arm and c["load"] == ld), None)
            st = c["pages"][page][metric] if c else None
            if st and st["median"] is not None:
                xs.append(i + (k - (len(arms) - 1) / 2) * width)
                ys.append(st["median"] / 1000.0)
                lo.append((st["median"] - st["p25"]) / 1000.0)
                hi.append((st["p75"] - st["median"]) / 1000.0)
        ax.bar(xs, ys, width, yerr=[lo, hi], label=arm, capsize=2)
    ax.set_xticks(range(len(loads)), ["idle" if ld == 0 else f"load {ld:g}" for ld in loads])
    ax.set_ylabel(f"{metric.removesuffix('_ms').replace('_', ' ')} (s), median and quartiles")
    ax.set_title(f"{page}: {metric.removesuffix('_ms').replace('_', ' ')}")
    ax.legend(fontsize=7, ncol=2)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def cell_lines(summary: dict[str, Any]) -> list[list[str]]:
    """The cells' table: per cell and page, loads, medians of the page metrics, background."""
    lines = []
    for c in summary["cells"]:
        bg = c["background"] or {}
        for page, p in c["pages"].items():
            lines.append([
                c["server"], c["protocol"], "idle" if c["load"] == 0 else f"{c['load']:.2f}", page,
                f"{p['loads']}/{p['failed']}", *(_f(p[m]["median"], "{:.0f}") for m in PAGE_METRICS),
                _f(p["load_event_ms"]["p90"], "{:.0f}"), _f(bg.get("mean_response_s"), "{:.3f}"),
                _f(bg.get("largest_1pct_mean_response_s"), "{:.2f}"),
                _f(bg.get("throughput_bytes_per_s") and bg["throughput_bytes_per_s"] / 1e6, "{:.3f}"),
            ])  # fmt: skip
    return lines


CELL_HEAD = ["server", "proto", "load", "page", "loads/failed", "load event ms", "LCP ms", "FCP ms",
             "HTML end ms", "load event p90", "bg mean s", "bg largest 1% s", "bg MB/s"]  # fmt: skip


def render_html(summary: dict[str, Any], b: BrowserExperiment, with_figures: bool = True) -> str:
    figs = []
    if with_figures:
        for page in b.pages:
            for m in PAGE_METRICS:
                figs.append((f"{page}: {m}", base64.b64encode(figure(summary, page, m)).decode()))
    return _TEMPLATE.render(
        style=figures.PAGE_STYLE,
        name=b.name, description=b.exp.description, rate=f"{b.exp.uplink.rate_bits_per_s / 1e6:g}",
        missing=summary["missing"], head=CELL_HEAD, rows=cell_lines(summary),
        targets=[t | {"shown": _f(t["measured"])} for t in summary["targets"]], figs=figs,
        method=__doc__, config=b.exp.source, provenance=json.dumps(summary["provenance"], indent=2),
    )  # fmt: skip


def format_table(summary: dict[str, Any]) -> str:
    """The terminal's table: the cells, then every target."""
    lines = ["  ".join(CELL_HEAD)]
    lines += ["  ".join(r) for r in cell_lines(summary)]
    lines.append("")
    for t in summary["targets"]:
        state = "—" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"{t['server']} {t['protocol']} load {t['load']} {t['page']}: {t['key']} {t['target']}: "
                     f"{_f(t['measured'])} {state}")  # fmt: skip
    return "\n".join(lines)


_TEMPLATE = jinja2.Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>shortfirst — {{ name }}</title>
<style>
{{ style }}
</style></head><body>
<h1>shortfirst browser experiment: {{ name }}</h1>
<p>{{ description }}</p><p>Headless Chromium loads each page over HTTPS through a {{ rate }} Mbit/s
uplink while the background downloads load it; times are the browser's own, in ms from the
navigation's start (medians).</p>
{% if missing %}<p class="bad">Cells without page loads: {{ missing|join(", ") }}</p>{% endif %}
<h2>Cells</h2>
<table><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for cells in rows %}<tr>{% for c in cells %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
<h2>Targets</h2><table><tr><th>server</th><th>protocol</th><th>load</th><th>page</th><th>what</th>
<th>target</th><th>measured</th></tr>
{% for t in targets %}<tr class="{{ 'good' if t.met else 'bad' }}"><td>{{ t.server }}</td>
<td>{{ t.protocol }}</td><td>{{ t.load }}</td><td>{{ t.page }}</td><td>{{ t.key }}</td>
<td>{{ t.target }}</td><td>{{ t.shown }}</td></tr>
{% endfor %}</table>
{% for title, png in figs %}<figure><img alt="{{ title }}" src="data:image/png;base64,{{ png }}">
<figcaption>{{ title }}</figcaption></figure>{% endfor %}
<h2>Method</h2><pre>{{ method }}</pre>
<h2>Experiment file</h2><pre>{{ config }}</pre>
<h2>Provenance</h2><pre>{{ provenance }}</pre>
</body></html>"""
)
