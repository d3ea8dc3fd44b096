"""Figures and tables from a sweep's summary.json: the paper's Figures 5, 9, 11-14 and Table 1
beside ours, and a markdown summary.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path

from ....kit import REPO
from ..backends.bookstore import PAGES
from .join import timeline_stats
from .measure import full_view, targets

#: Cheap and costly interactions shown in the wait/exec figures (the paper's Figures 11–13 use
#: "Exec Search" and "Admin Response"; Best Sellers is our costly one that occurs often enough
#: to measure in short runs).
CHEAP, COSTLY = "SRES", "BESS"


PAPER_TABLE1 = REPO / "examples" / "bookstore" / "data" / "tpcw-costs-gatekeeper-table1.csv"


#: The paper's interaction names (Table 1) → our page codes.
PAPER_NAMES = {"Admin Response": "ADMC", "Execute Search": "SRES"}


def paper_table1() -> dict[str, dict[str, float]]:
    """Page code → the paper's Table 1 row (no-load and high-load cost in ms, frequency in percent)."""
    by_name = {name: code for code, (_, name) in PAGES.items()} | PAPER_NAMES
    out = {}
    with open(PAPER_TABLE1, newline="") as f:
        for row in csv.DictReader(f):
            code = by_name.get(row["interaction"])
            if code:
                out[code] = {k: float(v) for k, v in row.items() if k != "interaction"}
    return out


def _num(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f}"


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.1f}"


def report(summary_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Figures and tables from ``summary.json``: throughput and mean response time vs browsers (paper
    Figures 5 and 9), wait vs execution time for a cheap, a costly and the average interaction
    under fifo and sjf (Figures 11–13), the aging continuum (Figure 14), learned vs measured costs at
    no load and at peak next to the paper's Table 1, and a markdown summary with the targets.
    Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(summary_path.read_text())
    out_dir = out_dir or summary_path.parent
    points = doc["points"]
    modes = list(dict.fromkeys(p["mode"] for p in points))
    gk_modes = [m for m in modes if m != "direct"]
    where = _where(doc)
    written = _line_figures(plt, points, modes, where, out_dir)
    written.append(_wait_exec_figure(plt, points, modes, gk_modes, out_dir))
    written.append(_table1(points, modes, gk_modes, out_dir))
    written.append(_summary_md(doc, points, modes, where, summary_path, out_dir))
    return written


def _where(doc: dict) -> str:
    """Where and how the sweep ran, for every figure's title."""
    env = doc.get("environment", {})
    where = ""
    if env:
        where = f"CPUs {env.get('cpus')} of {env.get('online_cpus')}, nice {env.get('nice')}"
        if doc.get("think_shortening"):
            where += f", think time ÷{doc['think_shortening']:.0f}"
    return where


def _label(m: str) -> str:
    return m if m == "direct" else f"gatekeeper-{m}"


def _series(points: list[dict], mode: str, key) -> tuple[list[int], list[float]]:
    """(browsers, key(point)) of a mode's points, by browsers."""
    pts = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["browsers"])
    return [p["browsers"] for p in pts], [key(p) for p in pts]


def _line_figures(plt, points: list[dict], modes: list[str], where: str, out_dir: Path) -> list[Path]:
    """Throughput and response time vs browsers (paper Figures 5 and 9), and the aging continuum
    (Figure 14) when aging modes ran."""
    written: list[Path] = []

    def line_figure(name: str, shown: list[str], key, ylabel: str, title: str, log: bool) -> None:
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in shown:
            x, y = _series(points, m, key)
            ax.plot(x, y, marker="o", label=_label(m))
        ax.set_xlabel("emulated browsers")
        ax.set_ylabel(ylabel)
        ax.set_title(title + (f"\n({where})" if where else ""), fontsize=9)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        path = out_dir / f"tpcw-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    aging = [m for m in modes if m.startswith("sjf-aging")]
    line_figure(
        "throughput",
        modes,
        lambda p: p["throughput_per_min"],
        "throughput (interactions/min)",
        "Throughput (paper Figure 5)",
        False,
    )
    line_figure(
        "response",
        [m for m in modes if m not in aging],
        lambda p: p["mean_response_s"] * 1e3,
        "mean response time (ms)",
        "Response time (paper Figure 9)",
        True,
    )
    continuum = [m for m in ("fifo", *aging, "sjf") if m in modes]
    if aging:
        line_figure(
            "aging",
            continuum,
            lambda p: p["mean_response_s"] * 1e3,
            "mean response time (ms)",
            "Aging continuum, sjf-aging:X = wait ≤ X × cost (paper Figure 14)",
            True,
        )
    return written


def _wait_exec(p: dict, code: str | None) -> tuple[float, float]:
    per = p.get("per_interaction", {})
    if code is not None:
        e = per.get(code, {})
        return e.get("mean_wait_s", math.nan), e.get("mean_exec_s", math.nan)
    n = sum(e.get("count", 0) for e in per.values())
    if not n:
        return math.nan, math.nan
    w = sum(e.get("count", 0) * e.get("mean_wait_s", 0.0) for e in per.values()) / n
    x = sum(e.get("count", 0) * e.get("mean_exec_s", 0.0) for e in per.values()) / n
    return w, x


def _wait_exec_figure(plt, points: list[dict], modes: list[str], gk_modes: list[str], out_dir: Path) -> Path:
    """Wait vs execution time of a cheap, a costly and the average interaction (Figures 11-13)."""
    shown = [m for m in ("fifo", "sjf") if m in modes] or gk_modes or modes
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=False)
    panels = (
        (CHEAP, "Search Results, cheap (paper Figure 11)"),
        (COSTLY, "Best Sellers, costly (paper Figure 12)"),
        (None, "average (paper Figure 13)"),
    )
    for ax, (code, title) in zip(axes, panels, strict=True):
        for m in shown:
            x, w = _series(points, m, lambda p, c=code: _wait_exec(p, c)[0] * 1e3)
            _, e = _series(points, m, lambda p, c=code: _wait_exec(p, c)[1] * 1e3)
            (line,) = ax.plot(x, e, marker="o", label=f"{m} exec")
            ax.plot(x, w, marker="x", linestyle="--", color=line.get_color(), label=f"{m} wait")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("emulated browsers")
        ax.set_ylabel("ms")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    path = out_dir / "tpcw-wait-exec.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _table1(points: list[dict], modes: list[str], gk_modes: list[str], out_dir: Path) -> Path:
    # Table 1: learned cost (the gatekeeper's estimate) and measured execution time (admission to
    # last byte) per interaction at no load (the lightest load point) and at peak (the load point
    # of highest throughput), for sjf (or the first gatekeeper mode), next to the paper's Table 1.
    ref = "sjf" if "sjf" in modes else (gk_modes[0] if gk_modes else None)
    lines = [
        f"Costs per interaction (ms), mode {ref}; paper: MySQL, Table 1 of Elnikety et al. 2004.",
        "",
        "| interaction | paper no load | paper high load | learned, no load | measured, no load "
        "| learned, peak | measured, peak | paper mix % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if ref is not None:
        pts = [p for p in points if p["mode"] == ref]
        lo = min(pts, key=lambda p: p["browsers"])
        hi = max(pts, key=lambda p: p["throughput_per_min"])
        lines[0] += f" No load = {lo['browsers']} browsers, peak = {hi['browsers']} browsers."
        paper = paper_table1()
        for code, (_, name) in PAGES.items():
            a, b = lo["per_interaction"].get(code, {}), hi["per_interaction"].get(code, {})
            pp = paper.get(code, {})
            row = [
                name,
                f"{pp['no_load_ms']:.2f}" if pp else "-",
                f"{pp['high_load_ms']:.2f}" if pp else "-",
                _ms(a.get("learned_cost_s")),
                _ms(a.get("mean_exec_s")),
                _ms(b.get("learned_cost_s")),
                _ms(b.get("mean_exec_s")),
                f"{pp['frequency_percent']:g}" if pp else "-",
            ]
            lines.append("| " + " | ".join(row) + " |")
    path = out_dir / "tpcw-table1.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _grid(points: list[dict], modes: list[str], cell: Callable[[dict], str]) -> list[str]:
    """A mode x browsers table; ``cell`` renders one point (absent points are blank)."""
    browsers = sorted({p["browsers"] for p in points})
    rows = ["| mode | " + " | ".join(str(n) for n in browsers) + " |", "|---" * (len(browsers) + 1) + "|"]
    for m in modes:
        at = {p["browsers"]: p for p in points if p["mode"] == m}
        rows.append(f"| {m} | " + " | ".join(cell(at[n]) if n in at else "" for n in browsers) + " |")
    return rows + [""]


def _summary_md(
    doc: dict, points: list[dict], modes: list[str], where: str, summary_path: Path, out_dir: Path
) -> Path:
    """``tpcw-summary.md``: throughput and mean response per (mode, browsers), the accountings,
    the learned costs over time, the joined logs, PostgreSQL's memory, and the targets."""

    def grid(cell: Callable[[dict], str]) -> list[str]:
        return _grid(points, modes, cell)

    # Summary: throughput and mean response per (mode, browsers), and the targets.
    t = doc.get("targets") or targets(points)
    repeat = doc.get("best_sellers_repeat", 1)
    if repeat != 1:
        # Not TPC-W's Best Sellers: say so where every figure is read.
        where += f"; Best Sellers runs its query {repeat}x per request, not once as in TPC-W"
    md = [f"# Gatekeeper on the TPC-W bookstore ({where}; capacity {doc.get('capacity', '?')})", ""]
    md += ["## Throughput (interactions/min)", "", *grid(lambda p: f"{p['throughput_per_min']:.0f}")]
    md += ["## Mean response time (ms)", "", *grid(lambda p: _ms(p["mean_response_s"]))]
    if any("cpu" in p for p in points):
        md += [
            "## CPU stolen by the host (s, the most of any CPU the sweep ran on, over the whole load run)",
            "",
            "A point whose throughput dips with steal of more than a few percent of its run lost the CPU to "
            "the host, not to its policy.",
            "",
            *grid(lambda p: "" if p.get("cpu") is None else f"{p['cpu']['max_steal_s']:.2f}"),
        ]
    md += _md_full(doc, points, grid)
    md += _md_timelines(doc, points, summary_path)
    md += _md_joined(points)
    md += _md_postgres(doc, points)
    md += ["## Targets (successful interactions only, the paper's accounting)", "", "```json"]
    md += [json.dumps(t, indent=2), "```", ""]
    tf = doc.get("targets_full_accounting") or targets(full_view(points))
    md += ["## Targets (full accounting)", "", "```json", json.dumps(tf, indent=2), "```", ""]
    path = out_dir / "tpcw-summary.md"
    path.write_text("\n".join(md))
    return path


def _md_full(doc: dict, points: list[dict], grid: Callable) -> list[str]:
    """The full accounting per point, and Little's law per point."""
    md: list[str] = []
    if any("full" in p for p in points):
        md += [
            f"## Full accounting (every ended request; a timeout counts as {doc.get('client_timeout_s')} s)",
            "",
            "Throughput (interactions/min) / mean response time (ms):",
            "",
            *grid(
                lambda p: (
                    ""
                    if "full" not in p
                    else f"{p['full']['throughput_per_min']:.0f} / {_ms(p['full']['mean_response_s'])}"
                )
            ),
        ]
        md += [
            "## Little's law per point (N = X (R + Z), from the request log)",
            "",
            "R ended: mean response of the requests ended in the window; R all: with those unfinished at"
            " its end at their wait so far (a lower bound); R implied = N / X − Z; waiting: time-average"
            " number of browsers waiting for a response.",
            "",
            "| mode | browsers | X full (/s) | R ended (ms) | R all (ms) | R implied (ms) | Z (ms) "
            "| X(R+Z) full | X(R+Z) successful only | waiting | timed out | failed | in flight at end |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in points:
            lt = p.get("little")
            if not lt:
                continue
            f = p["full"]
            md.append(
                f"| {p['mode']} | {p['browsers']} | {f['throughput_per_min'] / 60:.1f} | "
                f"{_ms(f.get('mean_response_ended_s'))} | {_ms(f['mean_response_s'])} | "
                f"{_ms(lt.get('implied_mean_response_s'))} | {_ms(lt['mean_think_s'])} | "
                f"{_num(lt['n_full'])} | {_num(lt['n_paper'])} | {_num(lt.get('mean_waiting'))} | "
                f"{p.get('timed_out', 0)} | "
                f"{p.get('failed', 0)} | {p.get('in_flight_at_end', 0)} |"
            )
        md.append("")
    return md


def _md_timelines(doc: dict, points: list[dict], summary_path: Path) -> list[str]:
    """Learned costs over time, from each gatekeeper point's timeline.csv."""
    md: list[str] = []
    timelines = []
    warmup_s = float(doc.get("config", {}).get("load", {}).get("warmup_s", 0.0))
    for p in points:
        name = f"{p['mode'].replace(':', '-').replace('@', '-')}-{p['browsers']}"
        path = summary_path.parent / name / "timeline.csv"
        if p["mode"] != "direct" and path.exists():
            timelines.append((p, timeline_stats(path, warmup_s)))
    if timelines:
        md += [
            f"## Learned costs over time (each point's timeline.csv, sampled once a second, after the "
            f"{warmup_s:g} s warm-up)",
            "",
            "A type whose learned cost reaches the capacity runs only when nothing else is admitted, and "
            "under SJF a type priced behind the work that fills the gate is not admitted at all: it gets "
            "no new samples, so its estimate cannot move (a lock-in) unless the gatekeeper re-samples it "
            "(a probe after `resample_after` without a sample, 5 s by default). *Longest unchanged*: the "
            "longest span over which a type's learned cost did not move (no sample came back), for the "
            "type where it is longest; a rare type also stays unchanged between its arrivals, so compare "
            "with fifo at the same load.",
            "",
            "| mode | browsers | samples | types at or above the capacity (s) | Search Results max (ms) "
            "| Best Sellers max (ms) | longest unchanged (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for p, st in timelines:
            over = (
                ", ".join(f"{k} {v:.0f}" for k, v in sorted(st["at_or_above_capacity_s"].items())) or "none"
            )
            mx = st["max_cost_s"]
            frozen = st.get("longest_unchanged_s", {})
            longest = max(frozen, key=frozen.get) if frozen else None
            md.append(
                f"| {p['mode']} | {p['browsers']} | {st['samples']} | {over} | "
                f"{_ms(mx.get('GET /search_results'))} | {_ms(mx.get('GET /best_sellers'))} | "
                + (f"{frozen[longest]:.0f} ({longest}) |" if longest else "– |")
            )
        md.append("")
    return md


def _md_joined(points: list[dict]) -> list[str]:
    """The browsers' and the bookstore's logs joined per request, per point."""
    md: list[str] = []
    joined_pts = [p for p in points if "joined" in p]
    if joined_pts:
        md += [
            "## Browsers' and bookstore's logs joined per request",
            "",
            "Successful requests: exec = the bookstore's handler time plus the browser's read after its "
            "first byte; wait = the rest of the response time (connection, proxy, admission queue, "
            "relay), on the same requests (matched: the "
            "share found in the bookstore's log). Failed: HTTP errors, e.g. the gatekeeper's 503 after "
            "max_queue_wait_s. Given up: the browser's timeout ended them; reached bookstore = the "
            "bookstore began them while the browser still waited (dropped: it then saw the connection "
            "close and dropped the handler; PostgreSQL may still finish the query); bookstore s = their "
            "time in the bookstore's handlers (summed over concurrent requests, not CPU time). Unmatched: "
            "bookstore requests no browser request accounts for (begun after their browser had gone, "
            "errors, or not matched). Bookstore s, all: every request it began in the window.",
            "",
            "| mode | browsers | matched | mean wait (ms) | mean exec (ms) | mean response (ms) | failed "
            "| given up | reached bookstore | dropped | bookstore s on given up | unmatched (n / s) "
            "| bookstore s, all | cancelled while queued (whole run) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in joined_pts:
            j, per = p["joined"], p.get("per_interaction", {})
            n = sum(e.get("joined_count", 0) for e in per.values())

            def avg(key: str, per=per, n=n) -> float | None:
                if not n:
                    return None
                return sum(e.get("joined_count", 0) * e.get(key, 0.0) for e in per.values()) / n

            g, u = j["given_up"], j.get("unmatched_app", {})
            cancelled = p.get("gatekeeper_cancelled_while_queued")
            md.append(
                f"| {p['mode']} | {p['browsers']} | {j['matched']}/{j['ok']} | {_ms(avg('mean_wait_s'))} | "
                f"{_ms(avg('mean_exec_s'))} | {_ms(avg('mean_response_s'))} | {p.get('failed', 0)} | "
                f"{g['count']} | "
                f"{g['reached_app']} | {g['dropped']} | {g['app_s']:.1f} | "
                f"{u.get('count', '-')} / {u.get('app_s', 0.0):.1f} | "
                f"{j['app_busy_s']:.1f} | {'-' if cancelled is None else f'{cancelled:.0f}'} |"
            )
        md.append("")
    return md


def _md_postgres(doc: dict, points: list[dict]) -> list[str]:
    """PostgreSQL's memory and I/O per point."""
    md: list[str] = []
    pg_pts = [p for p in points if "postgres" in p]
    if pg_pts:
        pgs = doc.get("postgres", {})
        md += [
            f"## PostgreSQL memory and I/O per point (shared_buffers {pgs.get('shared_buffers')}, work_mem "
            f"{pgs.get('work_mem')}, memory limit {pgs.get('memory_limit_mb')} MB, read limit "
            f"{pgs.get('read_iops_limit')}/s, database "
            f"{_mb(pgs.get('database_bytes'))} MB)",
            "",
            "| mode | browsers | backends' private (rss) MB | page cache MB | peak usage MB | disk reads "
            "(PostgreSQL) | disk read MB (machine) | blocks read | shared-buffer hit ratio | OOM kills |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in pg_pts:
            pg = p["postgres"]
            mem, db = pg.get("mem", {}), pg.get("db", {})
            hit = db.get("shared_buffers_hit_ratio")
            md.append(
                f"| {p['mode']} | {p['browsers']} | {_mb(mem.get('rss_bytes'))} | "
                f"{_mb(mem.get('cache_bytes'))} | {_mb(mem.get('max_usage_bytes'))} | "
                f"{pg.get('io', {}).get('reads', '-')} | {_mb(pg.get('disk_read_bytes'))} | "
                f"{db.get('blks_read', '-')} | "
                f"{'-' if hit is None else f'{hit:.3f}'} | {mem.get('oom_kill', '-')} |"
            )
        md.append("")
    return md
