"""Overload results (Schroeder & Harchol-Balter 2006) from raw run directories alone.

    python -m shortfirst_lab overload DIR [DIR...] --out OUT     # e.g. OUT = results/overload
    python -m shortfirst_lab report DIR                         # one experiment with schedules

reads the experiment directories the runner leaves (`experiment.toml`, and per run
`requests.csv`, `summary.json`, `health.csv`, `run.json`) and writes `OUT/summary.json`,
`OUT/report.html` and `OUT/figures/*.png` (overloadfigs.py). The summary::

    {"workloads": [{"name": "W1", "setup": "A", "fair": {...}, "srpt": {...}}, ...],
     "persistent": [{"rho": 1.2, "policy": "fair", "first_syn_drop_s": 71.0, ...}, ...],
     "runs": [...], "checks": [...], "missing": [...]}

A run is a **workload** run when its load schedule is one of the paper's presets (W1-W10,
`client.load_schedules`); its setup is the experiment's `[setups]` name, "A" (the baseline)
without setups. It is a **persistent** run when its offered load is constant above 1: a
`const@M` schedule (ρ = load × M) or no schedule and a load above 1. Per policy (the mean
over repeats, `repeats` says how many; `valid` only if every one is):

- `mean_response_s`: mean response time (request start to last byte) of the requests
  scheduled in the run's window [warmup_s, duration_s) that completed;
- `mean_ttfb_s`: their mean time to first byte (request start to first response byte);
- `largest_1pct_mean_response_s`: the mean response time of the largest 1% of them by size;
- `incomplete`: requests scheduled in the window that did not complete (timeouts, user
  aborts after their last retry, errors, never sent);
- `syn_drops`: the increase of the server namespace's `ListenDrops` over the run: every
  packet of a connection attempt the listener dropped (SYNs on a full SYN or accept queue,
  handshake ACKs on a full accept queue; `TcpExt` has no counter of SYNs alone);
- `peak_open_connections`: the most server sockets neither listening nor closed in any
  1-second health sample;
- `valid`: the runner recorded the run ok and the generator called it valid (lateness).

`first_syn_drop_s` (persistent entries, the earliest over repeats): seconds from the
generator's start to the first health sample whose `ListenDrops` had grown; null if none.
Persistent entries are per (ρ, policy) and also per setup, run length (`duration_s`) and
server connection limit, so the 30-minute memory run (overload-rss.toml) is an entry of its
own, not pooled with the 10-minute ones, and so are the runs of a server that stops accepting
at a limit (overload-persistent-apache.toml: `max_connections` 350, `at_max_connections`
"wait"; both null for the server's defaults). A check compares FAIR and SRPT of one server.
`checks` sets the paper's claims beside what was measured, and the memory check of a long
persistent run: the server's RSS at the end within 1.5x of its RSS after the first minute,
the admin endpoint answering in every sample (`admin_ok` in health.csv).
"""

from __future__ import annotations

import argparse
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..kit import LabError, write_atomic, write_json
from ..spec import schedules
from ..spec.experiment import Experiment, RunSpec, load_experiment
from . import metrics as analysis
from . import series

#: The per-policy fields of a summary entry, in order.
FIELDS = (
    "mean_response_s",
    "mean_ttfb_s",
    "largest_1pct_mean_response_s",
    "incomplete",
    "refused",
    "syn_drops",
    "peak_open_connections",
    "valid",
)
BASELINE_SETUP = "A"
#: The memory check: RSS at the end against RSS this long into the run.
RSS_REFERENCE_S = 60.0
RSS_MAX_GROWTH = 1.5


class OverloadError(LabError, RuntimeError):
    """An input the summary cannot use (names the file)."""


@dataclass
class Run:
    """One run's identity and metrics, and where its logs are."""

    run_dir: Path
    policy: str
    load: float
    repeat: int
    schedule: str
    setup: str
    metrics: dict[str, Any]
    duration_s: float  # when the schedule ended (the drain follows)
    health: pd.DataFrame = field(repr=False)
    series: pd.DataFrame = field(repr=False)
    requests: pd.DataFrame = field(repr=False)  # the window's (analysis.window)
    #: `server.max_connections` and `server.at_max_connections` as the experiment set them.
    connection_limit: tuple[int, str] = (0, "")

    @property
    def workload(self) -> str | None:
        return schedules.workload_name(self.schedule) if self.schedule else None

    @property
    def rho(self) -> float | None:
        """The constant offered load of a persistent run, else None."""
        if self.schedule:
            m = schedules.constant_multiplier(self.schedule)
            return round(self.load * m, 4) if m is not None and self.load * m > 1 else None
        return round(self.load, 4) if self.load > 1 else None


def applies(exp: Experiment) -> bool:
    """Whether an experiment is an overload one: load schedules, setups, or a load above 1."""
    return exp.is_overload()


# --------------------------------------------------------------------------- per run


def health_metrics(h: pd.DataFrame) -> dict[str, Any]:
    """SYN drops, peak connections, the first SYN drop, and the memory and liveness check."""
    out: dict[str, Any] = {"syn_drops": None, "first_syn_drop_s": None, "peak_open_connections": None}
    if h.empty or "t_s" not in h:
        return out
    if "listen_drops" in h and h["listen_drops"].notna().any():
        d = h[["t_s", "listen_drops"]].dropna()
        grown = d[d["listen_drops"] > d["listen_drops"].iloc[0]]
        out["syn_drops"] = int(d["listen_drops"].iloc[-1] - d["listen_drops"].iloc[0])
        out["first_syn_drop_s"] = float(grown["t_s"].iloc[0]) if len(grown) else None
    if "open_connections" in h and h["open_connections"].notna().any():
        out["peak_open_connections"] = int(h["open_connections"].max())
    out.update(rss_check(h))
    return out


def rss_check(h: pd.DataFrame) -> dict[str, Any]:
    """Server memory and liveness over a run: RSS after the first minute and at the end, their
    ratio (≤ RSS_MAX_GROWTH passes), and the share of samples in which the admin endpoint
    answered. Shorter runs than a minute compare against their first sample."""
    out: dict[str, Any] = {}
    if "server_rss_bytes" in h:
        rss = h[["t_s", "server_rss_bytes"]].dropna()
        rss = rss[rss["server_rss_bytes"] > 0]  # 0: the server had exited (or not started)
        if len(rss):
            after = rss[rss["t_s"] >= RSS_REFERENCE_S]
            ref = after.iloc[0] if len(after) else rss.iloc[0]
            end = rss.iloc[-1]
            out["rss_reference_s"] = float(ref["t_s"])
            out["rss_after_1min_bytes"] = int(ref["server_rss_bytes"])
            out["rss_end_bytes"] = int(end["server_rss_bytes"])
            out["rss_end_s"] = float(end["t_s"])
            out["rss_growth"] = float(end["server_rss_bytes"] / ref["server_rss_bytes"])
            out["rss_max_bytes"] = int(rss["server_rss_bytes"].max())
    if "admin_ok" in h:
        ok = h["admin_ok"].fillna(0)
        out["admin_samples"] = int(len(ok))
        out["admin_answered_fraction"] = float(ok.mean()) if len(ok) else None
        out["admin_answered_throughout"] = bool(len(ok) and (ok == 1).all())
    return out


def client_metrics(
    df: pd.DataFrame, warmup_s: float, duration_s: float, received: analysis.Received | None = None
) -> dict[str, Any]:
    """Response time, time to first byte, largest 1% and incomplete requests in the window;
    throughput from `received` (the run's received.csv) when given."""
    m = analysis.run_metrics(df, warmup_s, duration_s, None, received)
    w = analysis.window(df, warmup_s, duration_s)
    ok = w[w["response_s"].notna()]
    ttfb = (ok["first_byte_s"] - ok["start_s"]).dropna()
    return {
        "mean_response_s": m["mean_response_s"],
        "mean_ttfb_s": float(ttfb.mean()) if len(ttfb) else None,
        "largest_1pct_mean_response_s": m["largest_1pct_mean_response_s"],
        "incomplete": m["failed"],
        "requests": m["requests"],
        "completed": m["completed"],
        "throughput_bytes_per_s": m["throughput_bytes_per_s"],
        "throughput_method": m["throughput_method"],
        "lateness_p99_ms_from_log": m["lateness_p99_ms_from_log"],
    }


def validity(run_dir: Path, lateness_from_log: float | None) -> dict[str, Any]:
    rec = _json(run_dir / "run.json")
    gen = _json(run_dir / "summary.json")
    lateness = gen.get("lateness_p99_ms", lateness_from_log)
    gen_valid = gen.get("valid")
    if gen_valid is None:
        gen_valid = analysis.lateness_ok(lateness)
    status = rec.get("status", "unknown")
    return {
        "valid": bool(gen_valid) and status == "ok",
        "runner_status": status,
        "lateness_p99_ms": lateness,
        # Over the whole run: requests the server turned away before any byte of a response
        # (connection refused, reset, closed); counted in `incomplete` within the window too.
        "refused": gen.get("refused"),
    }


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise OverloadError(f"{path}: not JSON: {e}") from e


def analyse_run(run_dir: Path, exp: Experiment, spec: RunSpec) -> Run:
    """One run's metrics from its raw files (series.csv is recomputed when missing)."""
    df = analysis.read_requests(run_dir / "requests.csv")
    sub = exp.for_run(spec)
    received = analysis.read_received(run_dir / "received.csv")
    m = client_metrics(df, sub.run.warmup_s, sub.run.duration_s, received)
    h = analysis.read_health(run_dir / "health.csv")
    m.update(health_metrics(h))
    m.update(validity(run_dir, m.pop("lateness_p99_ms_from_log")))
    s_path = run_dir / "series.csv"
    s = pd.read_csv(s_path) if s_path.exists() else series.per_second(df, str(run_dir / "requests.csv"))
    w = analysis.window(df, sub.run.warmup_s, sub.run.duration_s)
    return Run(
        run_dir,
        spec.policy,
        spec.load,
        spec.repeat,
        spec.schedule,
        spec.setup,
        m,
        sub.run.duration_s,
        h,
        s,
        w,
        (sub.server.max_connections, sub.server.at_max_connections),
    )


def collect(exp_dir: Path) -> tuple[Experiment, list[Run], list[str]]:
    """Every run of an experiment directory's matrix that has a requests.csv; the rest missing."""
    path = exp_dir / "experiment.toml"
    if not path.exists():
        raise OverloadError(f"{path}: missing; is {exp_dir} an experiment directory?")
    exp = load_experiment(path)
    runs, missing = [], []
    for spec in exp.matrix():
        d = exp_dir / "runs" / spec.run_id
        if (d / "requests.csv").exists():
            runs.append(analyse_run(d, exp, spec))
        else:
            missing.append(str(d))
    return exp, runs, missing


# --------------------------------------------------------------------------- summary


def _mean(values: list[Any]) -> Any:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(vals)) if vals else None


def pooled(runs: list[Run]) -> dict[str, Any]:
    """The per-policy fields over repeats: means, `valid` only if all are, the count."""
    out: dict[str, Any] = {k: _mean([r.metrics.get(k) for r in runs]) for k in FIELDS if k != "valid"}
    for k in ("incomplete", "refused", "syn_drops", "peak_open_connections"):
        if out[k] is not None and len(runs) == 1:
            out[k] = int(out[k])
    out["valid"] = all(r.metrics["valid"] for r in runs)
    out["repeats"] = len(runs)
    out["runs"] = [r.run_dir.name for r in runs]
    return out


def _workload_order(name: str) -> int:
    return int(name[1:])


def workload_entries(runs: list[Run], setup_order: list[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], dict[str, list[Run]]] = {}
    for r in runs:
        if r.workload is None:
            continue
        setup = r.setup or BASELINE_SETUP
        groups.setdefault((r.workload, setup), {}).setdefault(r.policy, []).append(r)

    def order(key: tuple[str, str]) -> tuple[int, int, str]:
        name, setup = key
        return (_workload_order(name), setup_order.index(setup) if setup in setup_order else 99, setup)

    return [
        {"name": name, "setup": setup, **{p: pooled(rs) for p, rs in sorted(groups[(name, setup)].items())}}
        for name, setup in sorted(groups, key=order)
    ]


def server_limit(connection_limit: tuple[int, str]) -> dict[str, Any]:
    """A persistent entry's server: its connection limit, both null for the defaults."""
    n, mode = connection_limit
    return {"max_connections": n or None, "at_max_connections": mode or None}


def _server_key(entry: dict[str, Any]) -> tuple[int, str]:
    """The connection limit of a summary entry (entries written before it was kept: defaults)."""
    return (entry.get("max_connections") or 0, entry.get("at_max_connections") or "")


def persistent_entries(runs: list[Run]) -> list[dict[str, Any]]:
    groups: dict[tuple[float, float, str, str, tuple[int, str]], list[Run]] = {}
    for r in runs:
        if r.rho is not None:
            key = (r.rho, r.duration_s, r.policy, r.setup or BASELINE_SETUP, r.connection_limit)
            groups.setdefault(key, []).append(r)
    out = []
    for (rho, duration_s, policy, setup, limit), rs in sorted(groups.items()):
        drops = [r.metrics["first_syn_drop_s"] for r in rs if r.metrics.get("first_syn_drop_s") is not None]
        entry = {
            "rho": rho,
            "policy": policy,
            "setup": setup,
            "duration_s": duration_s,
            **server_limit(limit),
            "first_syn_drop_s": min(drops) if drops else None,
        }
        entry |= pooled(rs)
        entry["run_s"] = _mean([r.metrics.get("rss_end_s") for r in rs])
        entry["rss"] = [
            {k: r.metrics.get(k) for k in ("rss_after_1min_bytes", "rss_end_bytes", "rss_growth",
                                           "admin_answered_throughout", "rss_end_s")}
            for r in rs
        ]  # fmt: skip
        out.append(entry)
    return out


def checks(workloads: list[dict[str, Any]], persistent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's claims against the measured summary (met: None when not measured)."""
    rows: list[dict[str, Any]] = []

    def row(claim: str, paper: str, measured: float | None, met: bool | None, **kw: Any) -> None:
        rows.append({"claim": claim, "paper": paper, "measured": measured, "met": met, **kw})

    base = [w for w in workloads if w["setup"] == BASELINE_SETUP and "fair" in w and "srpt" in w]
    w1 = next((w for w in base if w["name"] == "W1"), None)
    r = analysis.ratio(w1["fair"]["mean_response_s"], w1["srpt"]["mean_response_s"]) if w1 else None
    row(
        "W1 baseline: FAIR/SRPT mean response time >= 5",
        "~8 (1.1 s vs 138 ms)",
        r,
        None if r is None else r >= 5,
    )
    r = analysis.ratio(w1["fair"]["mean_ttfb_s"], w1["srpt"]["mean_ttfb_s"]) if w1 else None
    row("W1 baseline: FAIR/SRPT time to first byte >= 5", "~10", r, None if r is None else r >= 5)
    for w in base:
        r = analysis.ratio(w["fair"]["mean_response_s"], w["srpt"]["mean_response_s"])
        row(f"{w['name']} baseline: FAIR/SRPT mean response time in [1.5, 8]", "2-8 across W1-W10", r,
            None if r is None else 1.5 <= r, workload=w["name"])  # fmt: skip
    for w in workloads:
        if "fair" in w and "srpt" in w:
            r = analysis.ratio(
                w["srpt"]["largest_1pct_mean_response_s"], w["fair"]["largest_1pct_mean_response_s"]
            )
            row(f"{w['name']} setup {w['setup']}: largest 1% SRPT/FAIR <= 1.1", "<= 1.1", r,
                None if r is None else r <= 1.1, workload=w["name"], setup=w["setup"])  # fmt: skip
    for rho, duration_s, limit in sorted({(p["rho"], p["duration_s"], _server_key(p)) for p in persistent}):
        point = (rho, duration_s, limit)
        by = {p["policy"]: p for p in persistent if (p["rho"], p["duration_s"], _server_key(p)) == point}
        if "fair" not in by or "srpt" not in by:
            continue
        server = f" at most {limit[0]} connections ({limit[1]})" if limit[0] else ""
        f, s = by["fair"]["first_syn_drop_s"], by["srpt"]["first_syn_drop_s"]
        note = {}
        if f is None:
            measured, met = None, None  # FAIR dropped nothing: nothing to be later than
            note = {
                "note": f"FAIR dropped no SYN in {by['fair']['run_s']:.0f} s"
                + ("" if s is not None else f", SRPT none in {by['srpt']['run_s']:.0f} s")
            }
        elif s is None:
            # SRPT dropped none for the whole run: its first drop is later than the run's end,
            # which shows 10x only when the run lasted 10x FAIR's first drop.
            measured = analysis.ratio(by["srpt"]["run_s"], f)
            met = True if measured is not None and measured >= 10 else None
            note = {"note": f"SRPT dropped no SYN in {by['srpt']['run_s']:.0f} s: at least this much later"
                    + ("" if met else "; the run is too short to show 10x")}  # fmt: skip
        else:
            measured = analysis.ratio(s, f)
            met = measured is not None and measured >= 10
        row(f"persistent rho={rho:g}{server}: SRPT's first SYN drop >= 10x later than FAIR's",
            "1.2: ~70 s vs ~30 min; 1.4: 18 s vs ~30 min", measured, met, rho=rho,
            **server_limit(limit), **note)  # fmt: skip
    for p in persistent:
        for k, rss in enumerate(p["rss"]):
            if rss.get("rss_growth") is None or (rss.get("rss_end_s") or 0) < RSS_REFERENCE_S:
                continue
            ok = rss["rss_growth"] <= RSS_MAX_GROWTH and rss.get("admin_answered_throughout") is True
            claim = (
                f"persistent rho={p['rho']:g} {p['policy']} {p['duration_s']:g} s run {k + 1}: "
                "RSS end/after 1 min <= 1.5, admin up"
            )
            row(claim, "(our own limit)", rss["rss_growth"], ok, rho=p["rho"], policy=p["policy"])
    return rows


def run_row(r: Run) -> dict[str, Any]:
    keep = (*FIELDS, "first_syn_drop_s", "requests", "completed", "throughput_bytes_per_s", "runner_status",
            "rss_after_1min_bytes", "rss_end_bytes", "rss_growth", "admin_answered_throughout")  # fmt: skip
    return {"run": r.run_dir.name, "dir": str(r.run_dir), "policy": r.policy, "load": r.load,
            "repeat": r.repeat, "schedule": r.schedule, "setup": r.setup or BASELINE_SETUP,
            "workload": r.workload, "rho": r.rho, **{k: r.metrics.get(k) for k in keep}}  # fmt: skip


def carry_over(summary: dict[str, Any], previous: dict[str, Any], source: str) -> dict[str, Any]:
    """`summary` with what `previous` (an earlier summary of the same experiments) measured on
    runs whose raw files are now missing (results/ keeps summaries, not raw logs): their run
    rows, and the workload and persistent entries made only of them and not measured afresh,
    each marked `carried_from`; the checks are then recomputed over both."""
    missing = set(summary["missing"])
    rows = [dict(r, carried_from=source) for r in previous.get("runs", []) if r.get("dir") in missing]
    names = {r["run"] for r in rows}

    def only_carried(runs: list[str]) -> bool:
        return bool(runs) and all(n in names for n in runs)

    fresh_w = {(w["name"], w["setup"]) for w in summary["workloads"]}
    workloads = [
        dict(w, carried_from=source)
        for w in previous.get("workloads", [])
        if (w["name"], w["setup"]) not in fresh_w
        and only_carried([n for p in ("fair", "srpt") if p in w for n in w[p].get("runs", [])])
    ]

    def point(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e["rho"], e["policy"], e["setup"], e.get("duration_s"), _server_key(e))

    fresh_p = {point(e) for e in summary["persistent"]}
    persistent = [
        dict(e, carried_from=source, **server_limit(_server_key(e)))
        for e in previous.get("persistent", [])
        if point(e) not in fresh_p and only_carried(e.get("runs", []))
    ]
    out = dict(summary)
    out["workloads"] = summary["workloads"] + workloads
    out["persistent"] = summary["persistent"] + persistent
    out["runs"] = summary["runs"] + rows
    out["missing"] = sorted(missing - {r["dir"] for r in rows})
    out["checks"] = checks(out["workloads"], out["persistent"])
    return out


def summarise(dirs: list[Path]) -> tuple[dict[str, Any], list[Run]]:
    runs: list[Run] = []
    missing: list[str] = []
    setup_order: list[str] = [BASELINE_SETUP]
    sources = []
    for d in dirs:
        exp, rs, miss = collect(d)
        runs += rs
        missing += miss
        setup_order += [s.name for s in exp.setups if s.name not in setup_order]
        sources.append({"dir": str(d), "experiment": exp.name, "runs": len(rs), "missing": len(miss)})
    workloads = workload_entries(runs, setup_order)
    persistent = persistent_entries(runs)
    summary = {
        "workloads": workloads,
        "persistent": persistent,
        "checks": checks(workloads, persistent),
        "runs": [run_row(r) for r in runs],
        "experiments": sources,
        "missing": missing,
    }
    return analysis.json_safe(summary), runs


# --------------------------------------------------------------------------- output


def build(
    dirs: list[Path] | Path, out: Path | None = None, with_figures: bool = True, carry: Path | None = None
) -> dict[str, Any]:
    """Writes OUT/summary.json, OUT/report.html and OUT/figures/*.png (OUT defaults to the only
    directory given); returns the summary. `carry`: an earlier summary whose entries stand in
    for runs whose raw files are missing (`carry_over`; their figures are not redrawn)."""
    from . import overloadfigs

    dirs = [dirs] if isinstance(dirs, Path | str) else list(dirs)
    dirs = [Path(d) for d in dirs]
    out = Path(out) if out is not None else dirs[0]
    if out is None or (len(dirs) > 1 and out in dirs):
        raise OverloadError("several experiment directories need an --out of their own")
    summary, runs = summarise(dirs)
    if not runs and carry is None:
        raise OverloadError(
            f"{', '.join(map(str, dirs))}: no run has its raw files, so there is nothing to rebuild "
            "the report from; summary.json and report.html are left as they are"
        )
    if carry is not None:
        try:
            previous = json.loads(Path(carry).read_text())
        except (OSError, ValueError) as e:
            raise OverloadError(f"{carry}: not a readable overload summary ({e})") from e
        summary = analysis.json_safe(carry_over(summary, previous, str(carry)))
    out.mkdir(parents=True, exist_ok=True)
    figs = overloadfigs.write_all(runs, summary, out / "figures") if with_figures else []
    write_json(out / "summary.json", summary)
    write_atomic(out / "report.html", render_html(summary, figs, out))
    return summary


def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def format_table(summary: dict[str, Any]) -> str:
    """The workload and persistent entries as a terminal table."""
    lines = [f"{'workload':<9}{'setup':<6}{'policy':<7}{'meanRT s':>10}{'TTFB s':>9}{'big1% s':>9}"
             f"{'incompl':>8}{'SYNdrop':>8}{'peakconn':>9}  valid"]  # fmt: skip
    for w in summary["workloads"]:
        for p in ("fair", "srpt"):
            if p in w:
                m = w[p]
                lines.append(
                    f"{w['name']:<9}{w['setup']:<6}{p:<7}{_f(m['mean_response_s']):>10}{_f(m['mean_ttfb_s']):>9}"
                    f"{_f(m['largest_1pct_mean_response_s']):>9}{_f(m['incomplete'], '{:.0f}'):>8}"
                    f"{_f(m['syn_drops'], '{:.0f}'):>8}{_f(m['peak_open_connections'], '{:.0f}'):>9}"
                    f"  {'yes' if m['valid'] else 'NO'}"
                )
    for p in summary["persistent"]:
        lines.append(
            f"rho={p['rho']:<5g}{p['setup']:<6}{p['policy']:<7}{_f(p['mean_response_s']):>10}"
            f"{_f(p['mean_ttfb_s']):>9}{_f(p['largest_1pct_mean_response_s']):>9}"
            f"{_f(p['incomplete'], '{:.0f}'):>8}"
            f"{_f(p['syn_drops'], '{:.0f}'):>8}{_f(p['peak_open_connections'], '{:.0f}'):>9}"
            f"  {'yes' if p['valid'] else 'NO'}  first SYN drop {_f(p['first_syn_drop_s'], '{:.0f} s')}"
            f"  {p.get('duration_s') or 0:.0f} s"
            + (f", at most {p['max_connections']} connections" if p.get("max_connections") else "")
        )
    for c in summary["checks"]:
        state = {True: "met", False: "MISSED", None: "not measured"}[c["met"]]
        state += f" ({c['note']})" if c.get("note") else ""
        lines.append(f"check: {c['claim']} (paper {c['paper']}): {_f(c['measured'], '{:.2f}')} {state}")
    return "\n".join(lines)


def render_html(summary: dict[str, Any], figs: list[tuple[str, Path]], out: Path) -> str:
    """One page: the table, the checks, the figures (files beside it, linked relatively)."""
    esc = html.escape
    rows = "".join(f"<tr><td>{esc(line)}</td></tr>" for line in format_table(summary).splitlines())
    imgs = "".join(
        f'<figure><img src="{esc(str(p.relative_to(out)))}" alt="{esc(t)}">'
        f"<figcaption>{esc(t)}</figcaption></figure>"
        for t, p in figs
    )
    missing = "".join(f"<li>{esc(m)}</li>" for m in summary["missing"])
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Overload</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{font-family:monospace;white-space:pre}"
        "img{max-width:100%}</style></head><body><h1>Web servers under overload: FAIR vs SRPT</h1>"
        f"<pre>{esc(__doc__ or '')}</pre><table>{rows}</table>"
        + (f"<h2>Missing runs</h2><ul>{missing}</ul>" if missing else "")
        + f"<h2>Figures</h2>{imgs}</body></html>\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab overload",
        description="The overload summary (workloads W1-W10 x setups, persistent overload) and its "
        "figures from experiment directories' raw logs.",
    )
    ap.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="experiment directories written by `run`"
    )
    ap.add_argument("--out", type=Path, help="where to write (default: the only DIR)")
    ap.add_argument(
        "--carry",
        type=Path,
        metavar="SUMMARY",
        help="an earlier summary.json whose entries stand in for runs whose raw files are missing",
    )
    a = ap.parse_args(argv)
    if a.out is None and len(a.dirs) > 1:
        ap.error("several DIRs need --out")
    summary = build(a.dirs, a.out, carry=a.carry)
    print(format_table(summary))
    print(f"\nsummary: {((a.out or a.dirs[0]) / 'summary.json').resolve()}")
    return 0
