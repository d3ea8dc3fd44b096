"""A point's figures from the browsers' log and the gatekeeper's metrics: throughput and response
times in the paper's and the full accounting, CPU time, and the sweep's targets.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ....kit import parse_prometheus
from ....spec.tpcw import parse_mode
from ..backends.bookstore import PATH_TO_CODE


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Prometheus text → {(metric, type label): value} for the per-type series (bucket lines and
    per-outcome series skipped)."""
    return {
        (m.name, m.labels["type"]): m.value
        for m in parse_prometheus(text)
        if "type" in m.labels and "outcome" not in m.labels and not m.name.endswith("_bucket")
    }


def type_to_code(type_label: str) -> str | None:
    """``GET /best_sellers`` (the HTTP tier's type) or ``tag:/best_sellers`` (the database
    tier's, from the bookstore's route tag) → ``BESS``; None for any other type."""
    path = type_label.removeprefix("tag:").split(" ", 1)[-1].split("?", 1)[0]
    return PATH_TO_CODE.get(path)


def _summarize(rts: list[float], window_s: float) -> dict:
    rts = sorted(rts)
    return {
        "completed": len(rts),
        "throughput_per_min": len(rts) / window_s * 60.0,
        "mean_response_s": sum(rts) / len(rts) if rts else math.nan,
        "p99_response_s": rts[min(len(rts) - 1, int(0.99 * len(rts)))] if rts else math.nan,
    }


def analyze(
    requests_csv: Path,
    warmup_s: float,
    end_s: float,
    timeout_s: float = math.inf,
    browsers: int | None = None,
    think_max_s: float = 0.0,
) -> dict:
    """Throughput and response times of the requests that ended in [warmup_s, end_s], in two
    accountings, and a Little's-law check.

    - The paper's (top-level keys, Elnikety et al. §4.5): successful interactions only — a request
      that fails, gets an HTTP error or hits the client timeout (``timeout_s``) is counted in
      ``failed`` / ``timed_out`` and in neither throughput nor response time.
    - ``full``: every request that ended, whatever its outcome; a timed-out one counts with the
      time the client waited (the timeout). Requests still in flight at ``end_s`` are counted in
      ``in_flight_at_end``; they are not throughput, but the full mean response time includes
      them with the time they had waited by ``end_s`` (``mean_response_s`` is then a lower bound;
      ``mean_response_ended_s`` leaves them out). ``shortfirst load`` logs them when they end
      after the run's duration (it drains); should a log lack them, then given the number of
      ``browsers``, a browser whose last response ended more than ``think_max_s`` before the
      end (or that never got one) was waiting, for at least that time less ``think_max_s``.
    - ``little``: in a closed loop every browser is either waiting for a response or thinking, so
      N = X × (R + Z), with X the rate of ended requests, R their mean response time and Z the
      mean think time actually taken (from one request's end to the same browser's next start).
      ``n_full`` uses the full accounting and should match the number of browsers (up to the
      window's edges: requests that began before it, or are unfinished at its end);
      ``n_paper`` (successful only) falls short by the browsers' time on excluded requests.
      ``mean_waiting`` is the time-average number of browsers waiting for a response in the
      window, from the log's intervals, unfinished requests included.
    """
    window_s = max(1e-9, end_s - warmup_s)
    t = _read_requests(requests_csv, warmup_s, end_s)
    for client in range(browsers or 0):
        reqs = t.by_client.get(str(client))
        last_done = max((d for _, d in reqs), default=0.0) if reqs else 0.0
        if last_done < end_s - think_max_s:
            t.in_flight_at_end += 1
            t.censored_rt.append(end_s - last_done - think_max_s)
            t.waiting_s += end_s - max(warmup_s, last_done + think_max_s)
    think_s = _mean_think_s(t.by_client, warmup_s, end_s)
    res = _summarize(t.ok_rt, window_s)
    full = _summarize(t.all_rt, window_s)
    full["mean_response_ended_s"] = full["mean_response_s"]
    if t.censored_rt:
        full["mean_response_s"] = (sum(t.all_rt) + sum(t.censored_rt)) / (len(t.all_rt) + len(t.censored_rt))
    full["per_interaction"] = {
        c: {"count": len(v), "mean_response_s": sum(v) / len(v), "timed_out": t.per_timed_out.get(c, 0)}
        for c, v in t.per_full.items()
    }
    browsers = browsers or len(t.by_client)
    res.update(
        {
            "failed": t.failed,
            "timed_out": t.timed_out,
            "in_flight_at_end": t.in_flight_at_end,
            "client_timeout_s": None if math.isinf(timeout_s) else timeout_s,
            "full": full,
            "little": _little(res, full, browsers, think_s, t.waiting_s / window_s),
            "per_interaction_response": {
                c: {"count": len(v), "mean_response_s": sum(v) / len(v)} for c, v in t.per.items()
            },
        }
    )
    return res


@dataclass
class _Tally:
    """What one pass over the browsers' log counts (see ``analyze``)."""

    per: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    per_full: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    per_timed_out: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ok_rt: list[float] = field(default_factory=list)
    all_rt: list[float] = field(default_factory=list)
    censored_rt: list[float] = field(default_factory=list)
    failed: int = 0
    timed_out: int = 0
    in_flight_at_end: int = 0
    by_client: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    waiting_s: float = 0.0


def _read_requests(requests_csv: Path, warmup_s: float, end_s: float) -> _Tally:
    """One pass over the browsers' log: response times of the requests that ended in the window
    by outcome and interaction, the requests in flight at its end, each browser's requests, and
    the browsers' time spent waiting in the window."""
    t = _Tally()
    with open(requests_csv, newline="") as f:
        for row in csv.DictReader(f):
            done = row.get("done_s") or ""
            start_s = float(row["start_s"]) if row.get("start_s") else math.nan
            done_s = float(done) if done else math.inf
            if not math.isnan(start_s):
                t.waiting_s += max(0.0, min(done_s, end_s) - max(start_s, warmup_s))
            if start_s <= end_s < done_s:
                t.in_flight_at_end += 1
                t.censored_rt.append(end_s - start_s)
            if not done:
                continue
            t.by_client[row.get("client", "")].append((start_s, done_s))
            if not (warmup_s <= done_s <= end_s):
                continue
            rt = done_s - start_s
            code = PATH_TO_CODE.get(row["path"].split("?", 1)[0], "OTHER")
            if row["outcome"] == "timeout":
                t.timed_out += 1
                t.per_timed_out[code] += 1
            elif row["outcome"] != "ok" or row["status"] != "200":
                t.failed += 1
            else:
                t.per[code].append(rt)
                t.ok_rt.append(rt)
            t.per_full[code].append(rt)
            t.all_rt.append(rt)
    return t


def _mean_think_s(by_client: dict[str, list[tuple[float, float]]], warmup_s: float, end_s: float) -> float:
    """Think time actually taken: from a request's end to the same browser's next start, for the
    requests that ended in the window (mean; 0 without any)."""
    thinks: list[float] = []
    for reqs in by_client.values():
        reqs.sort()
        for (_, done_a), (start_b, _) in zip(reqs, reqs[1:], strict=False):
            if warmup_s <= done_a <= end_s:
                thinks.append(max(0.0, start_b - done_a))
    return sum(thinks) / len(thinks) if thinks else 0.0


def _little(res: dict, full: dict, browsers: int, think_s: float, mean_waiting: float) -> dict:
    """Little's law, N = X (R + Z), in both accountings (see ``analyze``)."""

    def n(acc: dict) -> float | None:
        if not acc["completed"]:
            return None
        return (
            acc["throughput_per_min"]
            / 60.0
            * (acc.get("mean_response_ended_s", acc["mean_response_s"]) + think_s)
        )

    return {
        "browsers": browsers,
        "mean_think_s": think_s,
        "n_full": n(full),
        "n_paper": n(res),
        "n_full_over_browsers": n(full) / browsers if browsers and n(full) is not None else None,
        "mean_waiting": mean_waiting,
        # The mean response time Little's law implies at the measured full throughput.
        "implied_mean_response_s": browsers / (full["throughput_per_min"] / 60.0) - think_s
        if full["completed"]
        else None,
    }


def cpu_delta(before: dict[int, dict[str, float]], after: dict[int, dict[str, float]]) -> dict:
    """Per CPU, what a point used: ``after - before`` of ``cpu_times``, and the largest steal."""
    per = {str(c): {k: round(after[c][k] - before[c][k], 3) for k in after[c]} for c in after if c in before}
    return {"per_cpu": per, "max_steal_s": max((v["steal_s"] for v in per.values()), default=None)}


def full_view(points: list[dict]) -> list[dict]:
    """The points in the full accounting (every ended request, timeouts at the timeout), in the
    shape ``targets`` and the report read; points without it (older summaries) are left out."""
    return [{**p, **p["full"]} for p in points if "full" in p]


def targets(points: list[dict]) -> dict:
    """The sweep's three targets (the Gatekeeper paper's claims), computed from the points (absent
    modes give ``None``):

    - per mode, throughput at the highest load as a fraction of the mode's peak (gatekeeper ≥ 0.95
      while direct falls);
    - fifo mean response / sjf mean response at the highest load common to both (≥ 10);
    - sjf / fifo mean response of the costliest interactions there (≤ 1.2): Admin Confirm, the
      costliest per request but rare (few samples), and Best Sellers, the costliest frequent one.
    """
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for p in points:
        by_mode[p["mode"]].append(p)
    out: dict = {"throughput_at_highest_load_over_peak": {}}
    for mode, pts in by_mode.items():
        peak = max(pts, key=lambda p: p["throughput_per_min"])
        last = max(pts, key=lambda p: p["browsers"])
        out["throughput_at_highest_load_over_peak"][mode] = {
            "peak_per_min": peak["throughput_per_min"],
            "peak_browsers": peak["browsers"],
            "highest_browsers": last["browsers"],
            "at_highest_per_min": last["throughput_per_min"],
            "ratio": last["throughput_per_min"] / peak["throughput_per_min"]
            if peak["throughput_per_min"]
            else None,
        }
    common = sorted(
        {p["browsers"] for p in by_mode.get("fifo", [])} & {p["browsers"] for p in by_mode.get("sjf", [])}
    )
    if common:
        n = common[-1]
        fifo = next(p for p in by_mode["fifo"] if p["browsers"] == n)
        sjf = next(p for p in by_mode["sjf"] if p["browsers"] == n)
        out["browsers"] = n
        out["fifo_over_sjf_mean_response"] = fifo["mean_response_s"] / sjf["mean_response_s"]
        costliest = {}
        for code in COSTLIEST:
            f = fifo["per_interaction"].get(code, {})
            s = sjf["per_interaction"].get(code, {})
            if f.get("mean_response_s") and s.get("mean_response_s"):
                costliest[code] = {
                    "sjf_over_fifo": s["mean_response_s"] / f["mean_response_s"],
                    "fifo_mean_response_s": f["mean_response_s"],
                    "sjf_mean_response_s": s["mean_response_s"],
                    "fifo_count": f.get("count"),
                    "sjf_count": s.get("count"),
                }
        out["costliest_sjf_over_fifo"] = costliest
    placement = _placement(by_mode)
    if placement:
        out["placement"] = placement
    return out


#: The interactions whose mean under a shortest-first policy is held against FIFO's: the
#: costliest per request (Admin Confirm, rare) and the costliest frequent one (Best Sellers).
COSTLIEST = ("ADMC", "BESS")


def _placement(by_mode: dict[str, list[dict]]) -> dict:
    """The gatekeeper at the database tier against the HTTP tier, at the highest load a
    database-tier mode ran, per shortest-first mode of the database tier (``db:sjf``,
    ``db-fp:sjf-aging:2``): its interactions/min and mean response over the HTTP tier's ``sjf``
    (target: within 20%), each count-limited FIFO's mean over its mean (``count:N``; target ≥
    10) and the costliest interactions' mean over FIFO's at the same tier (``db:fifo``, else
    ``fifo``; target ≤ 1.15, the paper's 15%). Empty without database-tier modes."""
    modes = {m: parse_mode(m) for m in by_mode}
    db = [m for m, mode in modes.items() if mode.tier == "db"]
    if not db:
        return {}
    n = max(p["browsers"] for m in db for p in by_mode[m])

    def at(mode: str) -> dict | None:
        return next((p for p in by_mode.get(mode, []) if p["browsers"] == n), None)

    counts = [m for m, mode in modes.items() if mode.max_in_flight is not None]
    fifo = at("db:fifo") or at("fifo")
    out: dict = {"browsers": n, "http_mode": "sjf" if at("sjf") else None, "per_mode": {}}
    for m in db:
        p = at(m)
        if p is None or not modes[m].policy.startswith("sjf"):
            continue
        e: dict = {"throughput_per_min": p["throughput_per_min"], "mean_response_s": p["mean_response_s"]}
        http = at("sjf")
        if http:
            e["throughput_over_http"] = _ratio(p["throughput_per_min"], http["throughput_per_min"])
            e["mean_response_over_http"] = _ratio(p["mean_response_s"], http["mean_response_s"])
        e["count_fifo_mean_over_this"] = {
            c: _ratio(q["mean_response_s"], p["mean_response_s"]) for c in counts if (q := at(c))
        }
        if fifo:
            e["costliest_over_fifo"] = {
                code: _ratio(
                    p["per_interaction"].get(code, {}).get("mean_response_s"),
                    fifo["per_interaction"].get(code, {}).get("mean_response_s"),
                )
                for code in COSTLIEST
            }
            e["fifo_mode"] = fifo["mode"]
        out["per_mode"][m] = e
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing, not finite or b is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return None
    return a / b
