"""A farm experiment's `summary.json` and `report.html`, from its raw logs alone.

Inputs (written by `runners.farm`, never modified here)::

    DIR/experiment.toml                   the farm experiment as run
    DIR/farm/sizes.map                    the map HAProxy dispatched SITA-E by
    DIR/runs/<run>/requests.csv           through HAProxy, one row per request (shortfirst load)
    DIR/runs/<run>/received.csv, summary.json   the generator's (throughput, lateness)
    DIR/runs/<run>/host<i>.access.log     which requests host i served
    DIR/runs/<run>/sim-wire/, sim/       `shortfirst sim --servers C --dispatch ...` on the
                                          run's own arrivals (with each request's `host`), each
                                          request's service its wire cost, or its body
                                          (`idealsim`; the wire model fitted to the hosts' bytes)
    DIR/runs/<run>/run.json               the runner's record (status, dispatch, arm)
    DIR/runs/<run>/groups.json            with client groups: each group's clients and path

Every metric is `metrics.run_metrics`'s over the same window, for the measured and the
simulated requests alike. "Simulated" is the wire ideal (decision 0008: a request costs its
body, head, segment headers and its connection's control bytes, as the uplinks count them);
the body-only ideal is shown beside it; the slowdown's denominator is a request's size at one host's link
rate (8 × size ÷ rate: a farm has no idle calibration). Per run: requests each host served
(from its access log) and, under SITA-E, how many went to the host the map names. Per load:
SITA-E + SRPT against leastconn under FAIR and under SRPT (ratios baseline ÷ SITA-E, higher
is better; throughput SITA-E ÷ baseline), and each arm's measured ÷ simulated mean response.
With client groups, each group's metrics (`wanreport.group_metrics`) and, per load, the same
comparison per group; the ideal has no path delay, so a WAN run's measured ÷ simulated also
holds the groups' RTTs (handshake, request, slow start), which the LAN target does not allow.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from ..kit import LabError, write_atomic, write_json
from ..spec.farm import FarmExperiment, FarmRun
from ..spec.reader import read_spec
from . import figures, wanreport
from . import metrics as analysis

#: The targets of a farm at one load per host: (load, comparison key, op, threshold).
TARGETS = (
    (0.8, "mean_response_ratio_vs_leastconn_fair", ">=", 2.0),
    (0.8, "mean_response_ratio_vs_leastconn_srpt", ">=", 1.3),
    (0.8, "throughput_ratio_vs_leastconn_fair", ">=", 0.98),
    (0.8, "measured_over_simulated_max", "<=", 1.3),
)
_MAP_HEAD = re.compile(r"# host(\d+): \((\d+), (\d+|\.\.\.)\] bytes")
_ACCESS_PATH = re.compile(r'"[A-Z]+ (\S+) HTTP/[0-9.]+"')
#: Most access-log lines read per host (a run's requests are bounded by its trace prefix).
MAX_ACCESS_LINES = 10_000_000


class FarmReportError(LabError, RuntimeError):
    """A farm directory whose logs cannot be read; names the file."""


def read_map(path: Path) -> tuple[list[int], dict[str, int]]:
    """The cutoffs (host i takes sizes up to the i-th) and path → host of a `farm map` file."""
    cutoffs: list[int] = []
    hosts: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise FarmReportError(f"{path}: cannot read the map: {e.strerror}") from None
    for line in lines:
        if m := _MAP_HEAD.fullmatch(line):
            if m.group(3) != "...":
                cutoffs.append(int(m.group(3)))
        elif line and not line.startswith("#"):
            url, _, backend = line.rpartition(" ")
            if not backend.startswith("host") or not backend[4:].isdigit():
                raise FarmReportError(f"{path}: {line!r}: expected `PATH host<i>`")
            hosts[url] = int(backend[4:])
    return cutoffs, hosts


def served_paths(rdir: Path, hosts: int) -> pd.DataFrame:
    """(host, path) of every request the hosts' access logs record."""
    rows: list[tuple[int, str]] = []
    for i in range(hosts):
        path = rdir / f"host{i}.access.log"
        if not path.exists():
            continue
        with path.open(errors="replace") as f:
            for n, line in enumerate(f):
                if n >= MAX_ACCESS_LINES:
                    raise FarmReportError(f"{path}: more than {MAX_ACCESS_LINES} lines")
                if m := _ACCESS_PATH.search(line):
                    rows.append((i, m.group(1)))
    return pd.DataFrame(rows, columns=["host", "path"])


def _metrics(df: pd.DataFrame, exp: Any, received: analysis.Received | None) -> dict[str, Any]:
    line = analysis.Baseline(a_s=0.0, rate_eff_bits_per_s=float(exp.uplink.rate_bits_per_s))
    return analysis.run_metrics(df, exp.run.warmup_s, exp.run.duration_s, line, received)


def _simulated(rdir: Path, farm: FarmExperiment, name: str) -> dict[str, Any] | None:
    """The metrics of the run's ideal `name` (sim-wire, sim), per host requests; None without."""
    path = rdir / name / "requests.csv"
    if not path.exists():
        return None
    sim = analysis.read_requests(path)
    m = _metrics(sim, farm.exp, None)
    if "host" in sim.columns:
        w = analysis.window(sim, farm.exp.run.warmup_s, farm.exp.run.duration_s)
        m["host_requests"] = [int((w["host"] == i).sum()) for i in range(farm.hosts)]
    return m


def analyse_run(out: Path, farm: FarmExperiment, run: FarmRun, host_of: dict[str, int]) -> dict[str, Any]:
    """One run's row: its measured and simulated metrics, per host counts, map agreement."""
    rdir = out / "runs" / run.run_id
    rec = json.loads((rdir / "run.json").read_text()) if (rdir / "run.json").exists() else {}
    df = analysis.read_requests(rdir / "requests.csv")
    m = _metrics(df, farm.exp, analysis.read_received(rdir / "received.csv"))
    gen = json.loads((rdir / "summary.json").read_text()) if (rdir / "summary.json").exists() else {}
    lateness = gen.get("lateness_p99_ms", m["lateness_p99_ms_from_log"])
    served = served_paths(rdir, farm.hosts)
    row: dict[str, Any] = {
        "run": run.run_id,
        "arm": run.arm_label,
        "dispatch": run.dispatch,
        "policy": run.spec.policy,
        "scheduler": run.spec.scheduler,
        "load": run.spec.load,
        "repeat": run.spec.repeat,
        "status": rec.get("status", "unknown"),
        "lateness_p99_ms": lateness,
        "valid": rec.get("status") == "ok" and bool(gen.get("valid", analysis.lateness_ok(lateness))),
        "measured": m,
        "simulated": _simulated(rdir, farm, "sim-wire"),
        "simulated_payload": _simulated(rdir, farm, "sim"),
        "host_requests": [int((served["host"] == i).sum()) for i in range(farm.hosts)],
        "requests_sent": int(len(df)),
        "requests_served": int(len(served)),
    }
    groups = wanreport.read_groups(rdir)
    if groups is not None:
        row["groups"] = wanreport.group_metrics(
            analysis.window(df, farm.exp.run.warmup_s, farm.exp.run.duration_s), groups
        )
    if run.dispatch == "sita-e" and len(served):
        want = served["path"].map(host_of)
        row["served_where_the_map_says"] = int((want == served["host"]).sum())
    sim, payload = row["simulated"], row["simulated_payload"]
    row["measured_over_simulated"] = analysis.ratio(m["mean_response_s"], sim and sim["mean_response_s"])
    row["measured_over_payload_ideal"] = analysis.ratio(
        m["mean_response_s"], payload and payload["mean_response_s"]
    )
    return row


def _find(rows: list[dict[str, Any]], load: float, dispatch: str, policy: str) -> dict[str, Any] | None:
    return next(
        (r for r in rows if r["load"] == load and r["dispatch"] == dispatch and r["policy"] == policy), None
    )


def comparisons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load (first repeat): SITA-E + SRPT against leastconn under FAIR and SRPT, and the
    largest measured ÷ simulated mean response of the load's arms."""
    out = []
    for load in sorted({r["load"] for r in rows}):
        at = [r for r in rows if r["load"] == load and r["repeat"] == 1]
        sita = _find(at, load, "sita-e", "srpt")
        c: dict[str, Any] = {"load": load}
        for base in ("fair", "srpt"):
            b = _find(at, load, "leastconn", base)
            pair = sita and b
            c[f"mean_response_ratio_vs_leastconn_{base}"] = pair and analysis.ratio(
                b["measured"]["mean_response_s"], sita["measured"]["mean_response_s"]
            )
            c[f"mean_slowdown_ratio_vs_leastconn_{base}"] = pair and analysis.ratio(
                b["measured"]["mean_slowdown"], sita["measured"]["mean_slowdown"]
            )
            c[f"throughput_ratio_vs_leastconn_{base}"] = pair and analysis.ratio(
                sita["measured"]["throughput_bytes_per_s"], b["measured"]["throughput_bytes_per_s"]
            )
            sim = pair and b["simulated"] and sita["simulated"]
            c[f"simulated_mean_response_ratio_vs_leastconn_{base}"] = sim and analysis.ratio(
                b["simulated"]["mean_response_s"], sita["simulated"]["mean_response_s"]
            )
        if sita and sita.get("groups"):
            c["groups"] = _group_comparisons(at, load, sita)
        ratios = [r["measured_over_simulated"] for r in at if r["measured_over_simulated"] is not None]
        c["measured_over_simulated_max"] = max(ratios) if ratios else None
        out.append(c)
    return out


def _group_comparisons(at: list[dict[str, Any]], load: float, sita: dict[str, Any]) -> list[dict[str, Any]]:
    """Per client group: leastconn under FAIR and under SRPT against SITA-E + SRPT (mean
    response, baseline ÷ SITA-E)."""
    bases = {b: (_find(at, load, "leastconn", b) or {}).get("groups") or [] for b in ("fair", "srpt")}
    out = []
    for g in sita["groups"]:
        c: dict[str, Any] = {"name": g["name"], "rtt_ms": g["rtt_ms"]}
        for base, groups in bases.items():
            bg = next((x for x in groups if x["name"] == g["name"]), None)
            c[f"mean_response_ratio_vs_leastconn_{base}"] = bg and analysis.ratio(
                bg["mean_response_s"], g["mean_response_s"]
            )
        out.append(c)
    return out


def target_rows(comps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for load, key, op, threshold in TARGETS:
        c = next((c for c in comps if abs(c["load"] - load) < 1e-9), None)
        got = c.get(key) if c else None
        met = None if got is None else (got >= threshold if op == ">=" else got <= threshold)
        rows.append({"load": load, "key": key, "target": f"{op} {threshold:g}", "measured": got, "met": met})
    return rows


def summarise(out: Path) -> tuple[dict[str, Any], FarmExperiment]:
    spec = read_spec(out / "experiment.toml", kind="farm")
    farm: FarmExperiment = spec.value
    cutoffs, host_of = read_map(out / "farm" / "sizes.map")
    rows, missing = [], []
    for run in farm.matrix():
        if (out / "runs" / run.run_id / "requests.csv").exists():
            rows.append(analyse_run(out, farm, run, host_of))
        else:
            missing.append(run.run_id)
    prov = out / "provenance.json"
    summary = {
        "experiment": farm.name,
        "hosts": farm.hosts,
        "rate_bits_per_s": farm.exp.uplink.rate_bits_per_s,
        "sita_e_cutoffs_bytes": cutoffs,
        "runs": rows,
        "missing": missing,
        "comparisons": comparisons(rows),
        "provenance": json.loads(prov.read_text()) if prov.exists() else {},
    }
    summary["targets"] = target_rows(summary["comparisons"])
    return analysis.json_safe(summary), farm


def build(out: str | Path, with_figures: bool = True) -> dict[str, Any]:
    """Write DIR/summary.json and DIR/report.html; returns the summary."""
    out = Path(out)
    summary, farm = summarise(out)
    if not summary["runs"]:
        raise FarmReportError(f"{out}: no run has its raw logs (runs/*/requests.csv): nothing to report")
    write_json(out / "summary.json", summary)
    write_atomic(out / "report.html", render_html(summary, farm, with_figures))
    return summary


def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _run_cells(r: dict[str, Any]) -> list[str]:
    m, s = r["measured"], r["simulated"] or {}
    agree = r.get("served_where_the_map_says")
    return [
        r["arm"],
        f"{r['load']:.2f}",
        _f(m["mean_response_s"]),
        _f(s.get("mean_response_s")),
        _f(r["measured_over_simulated"], "{:.2f}"),
        _f((r["simulated_payload"] or {}).get("mean_response_s")),
        _f(m["mean_slowdown"], "{:.1f}"),
        _f(s.get("mean_slowdown"), "{:.1f}"),
        _f(m["largest_1pct_mean_response_s"]),
        _f(s.get("largest_1pct_mean_response_s")),
        _f(m["throughput_bytes_per_s"] and m["throughput_bytes_per_s"] / 1e6),
        _f(s.get("throughput_bytes_per_s") and s["throughput_bytes_per_s"] / 1e6),
        f"{m['completed']}/{m['requests']}",
        " / ".join(map(str, r["host_requests"])),
        "—" if agree is None else f"{agree}/{r['requests_served']}",
        _f(r["lateness_p99_ms"], "{:.2f}"),
    ]


RUN_HEAD = (
    "arm (dispatch+policy)",
    "load/host",
    "mean RT (s)",
    "sim",
    "meas÷sim",
    "body-only sim",
    "mean slowdown",
    "sim",
    "largest 1% RT (s)",
    "sim",
    "throughput (MB/s)",
    "sim",
    "completed",
    "served per host",
    "on the map's host",
    "lateness p99 (ms)",
)

_TEMPLATE = jinja2.Template(
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>shortfirst — {{ name }}</title>
<style>
{{ style }}
</style></head><body>
<h1>shortfirst farm experiment: {{ name }}</h1>
<p>{{ description }}</p><p>{{ hosts }} hosts of {{ rate }} Mbit/s behind HAProxy; SITA-E cutoffs
{{ cutoffs }} bytes (from the workload's trace).</p>
{% if missing %}<p class="bad">Runs without logs: {{ missing|join(", ") }}</p>{% endif %}
<h2>Runs: measured beside simulated</h2>
<table><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for valid, cells in rows %}<tr{% if not valid %} class="bad"{% endif %}>
{% for c in cells %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
<p>Simulated: <code>shortfirst sim --servers {{ hosts }} --dispatch ...</code> on each run's own
arrivals, each request's service its wire cost (body-only: its body).
Rows in red: the run failed or the generator was late (p99 &gt; 5 ms).</p>
<h2>SITA-E + SRPT against leastconn</h2>
<table><tr><th>load/host</th><th>RT ratio vs FAIR</th><th>(sim)</th><th>RT ratio vs SRPT</th>
<th>(sim)</th><th>slowdown ratio vs FAIR</th><th>throughput vs FAIR</th><th>max meas÷sim</th></tr>
{% for c in comps %}<tr><td>{{ c[0] }}</td>{% for x in c[1:] %}<td>{{ x }}</td>{% endfor %}</tr>{% endfor %}
</table>
<h2>Targets</h2><table><tr><th>load</th><th>what</th><th>target</th><th>measured</th></tr>
{% for t in targets %}<tr class="{{ 'good' if t.met else 'bad' }}"><td>{{ t.load }}</td><td>{{ t.key }}</td>
<td>{{ t.target }}</td><td>{{ t.shown }}</td></tr>{% endfor %}</table>
{% for title, note, head, trows in wan_tables %}<h2>{{ title }}</h2><p>{{ note }}</p>
<table><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for cells in trows %}<tr>{% for c in cells %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
{% endfor %}
{% for title, png in figs %}<figure><img alt="{{ title }}" src="data:image/png;base64,{{ png }}">
<figcaption>{{ title }}</figcaption></figure>{% endfor %}
<h2>Method</h2><pre>{{ method }}</pre>
<h2>Experiment file</h2><pre>{{ config }}</pre>
<h2>Provenance</h2><pre>{{ provenance }}</pre>
</body></html>"""
)


def render_html(summary: dict[str, Any], farm: FarmExperiment, with_figures: bool = True) -> str:
    comps = [
        [
            f"{c['load']:.2f}",
            _f(c["mean_response_ratio_vs_leastconn_fair"], "{:.2f}"),
            _f(c["simulated_mean_response_ratio_vs_leastconn_fair"], "{:.2f}"),
            _f(c["mean_response_ratio_vs_leastconn_srpt"], "{:.2f}"),
            _f(c["simulated_mean_response_ratio_vs_leastconn_srpt"], "{:.2f}"),
            _f(c["mean_slowdown_ratio_vs_leastconn_fair"], "{:.2f}"),
            _f(c["throughput_ratio_vs_leastconn_fair"], "{:.3f}"),
            _f(c["measured_over_simulated_max"], "{:.2f}"),
        ]
        for c in summary["comparisons"]
    ]
    figs = []
    if with_figures:
        png = figures.measured_beside_simulated(summary["runs"])
        figs.append(("Mean response time per arm: measured beside simulated", base64.b64encode(png).decode()))
    return _TEMPLATE.render(
        style=figures.PAGE_STYLE,
        name=farm.name,
        description=farm.exp.description,
        hosts=farm.hosts,
        rate=f"{farm.exp.uplink.rate_bits_per_s / 1e6:g}",
        cutoffs=summary["sita_e_cutoffs_bytes"],
        missing=summary["missing"],
        head=RUN_HEAD,
        rows=[(r["valid"], _run_cells(r)) for r in summary["runs"]],
        comps=comps,
        targets=[t | {"shown": _f(t["measured"])} for t in summary["targets"]],
        wan_tables=wanreport.tables(summary) + _group_comparison_tables(summary),
        figs=figs,
        method=__doc__,
        config=farm.exp.source,
        provenance=json.dumps(summary["provenance"], indent=2),
    )


def _group_comparison_tables(summary: dict[str, Any]) -> list[wanreport.Table]:
    rows = [
        [
            f"{c['load']:.2f}",
            g["name"],
            _f(g["rtt_ms"], "{:g}"),
            _f(g["mean_response_ratio_vs_leastconn_fair"], "{:.2f}"),
            _f(g["mean_response_ratio_vs_leastconn_srpt"], "{:.2f}"),
        ]
        for c in summary["comparisons"]
        for g in c.get("groups") or []
    ]
    if not rows:
        return []
    head = ["load/host", "group", "RTT ms", "RT ratio vs leastconn+FAIR", "RT ratio vs leastconn+SRPT"]
    note = "Per client group, leastconn's mean response time ÷ SITA-E + SRPT's (higher is better)."
    return [("SITA-E + SRPT against leastconn, per client group", note, head, rows)]


def format_table(summary: dict[str, Any]) -> str:
    """The terminal's table: each run measured and simulated, then the comparisons."""
    w = max(len(r["arm"]) for r in summary["runs"]) + 1
    lines = [
        f"{'arm':<{w}}{'load':>6}{'meanRT s':>10}{'sim':>8}{'m/s':>6}{'slowdown':>10}{'sim':>8}"
        f"{'big1% s':>9}{'sim':>8}{'MB/s':>7}{'done':>8}  per host"
    ]
    for r in summary["runs"]:
        m, s = r["measured"], r["simulated"] or {}
        lines.append(
            f"{r['arm']:<{w}}{r['load']:>6.2f}{_f(m['mean_response_s']):>10}{_f(s.get('mean_response_s')):>8}"
            f"{_f(r['measured_over_simulated'], '{:.2f}'):>6}{_f(m['mean_slowdown'], '{:.1f}'):>10}"
            f"{_f(s.get('mean_slowdown'), '{:.1f}'):>8}{_f(m['largest_1pct_mean_response_s']):>9}"
            f"{_f(s.get('largest_1pct_mean_response_s')):>8}"
            f"{_f(m['throughput_bytes_per_s'] and m['throughput_bytes_per_s'] / 1e6):>7}"
            f"{m['completed']:>8}  {'/'.join(map(str, r['host_requests']))}"
        )
    for c in summary["comparisons"]:
        for g in c.get("groups") or []:
            lines.append(
                f"load {c['load']:.2f} group {g['name']} (RTT {g['rtt_ms']:g} ms): SITA-E+SRPT vs leastconn "
                f"FAIR {_f(g['mean_response_ratio_vs_leastconn_fair'], '{:.2f}')}, "
                f"SRPT {_f(g['mean_response_ratio_vs_leastconn_srpt'], '{:.2f}')}"
            )
    lines.append("")
    for t in summary["targets"]:
        state = "—" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"load {t['load']} {t['key']} {t['target']}: {_f(t['measured'])} {state}")
    return "\n".join(lines)


__all__ = ["build", "format_table", "read_map", "served_paths", "summarise", "FarmReportError"]
