"""The browsers' log joined with the bookstore's, request by request: where each successful
request's time went (wait or exec), and what became of those whose browser gave up.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections import defaultdict
from pathlib import Path

from ..backends.bookstore import PATH_TO_CODE


def join_requests(
    requests_csv: Path,
    started_unix_s: float,
    app_log: Path,
    warmup_s: float,
    end_s: float,
    tolerance_s: float = 0.002,
    relay_s: float = 0.050,
) -> dict:
    """Joins the browsers' log (``shortfirst load``'s requests.csv) with the bookstore's
    (``bookstore serve --request-log``), request by request, for the requests that ended in
    [warmup_s, end_s].

    Neither log carries an id of the other, so a successful browser request is matched to the
    bookstore request of the same path whose end is nearest its first response byte, after
    removing the two clocks' offset (with the typical relay time: the most common gap): at most
    ``relay_s`` before it or ``tolerance_s`` after it, and that began after the browser sent it.
    Its time splits into ``exec`` (the bookstore's handler time, measured on its own clock, plus
    the browser's read from first to last byte) and ``wait`` (the rest: connection, proxy,
    admission queue, and the relay back to the browser, typically well under a millisecond), so
    ``wait + exec = response`` on the same requests and a matched request never has zero exec.
    A type's means do not depend on which of its requests were paired with which bookstore rows,
    only on which were matched at all.

    A browser request that timed out (``given_up``) is then matched to a still unmatched
    bookstore request of its path that began while the browser waited: work the application
    tier did for an answer nobody read. Bookstore requests left over (``unmatched_app``) began
    after their browser had given up (admitted although the client was gone), got an error, or
    were not matched.

    Returns ``matched``/``ok`` (the share of successful requests joined), per interaction
    ``count``, ``mean_wait_s``, ``mean_exec_s``, ``mean_response_s``; ``given_up`` with
    ``count``, ``reached_app``, ``dropped`` (the bookstore saw the connection close while it
    worked), ``app_s`` (their time in the bookstore's handlers), per interaction;
    ``unmatched_app`` (``count``, ``dropped``, ``app_s``); and ``app_busy_s``: the time in the
    handlers of every request the bookstore began in the window."""
    app, finishes = _read_app_log(app_log, started_unix_s)
    ok, gave_up = _read_browser_log(requests_csv)
    offset = _clock_offset(ok, finishes)
    per, matched = _match_successes(ok, app, finishes, offset, warmup_s, end_s, tolerance_s, relay_s)
    ok_in_window = sum(warmup_s <= done <= end_s for _, _, done, _ in ok)
    given_up = _match_given_up(gave_up, app, offset, warmup_s, end_s, tolerance_s)
    # Bookstore requests begun in the window that no browser request accounts for: begun after
    # their browser had given up (admitted although the client was gone), answered with an error,
    # or not matched (about ok - matched of them).
    unmatched = [r for rows in app.values() for r in rows if not r[4] and warmup_s <= r[1] + offset <= end_s]
    busy = sum(r[2] for rows in app.values() for r in rows if warmup_s <= r[1] + offset <= end_s)
    return {
        "ok": ok_in_window,
        "matched": matched,
        "clock_offset_s": offset,
        "per_interaction": {
            c: {
                "count": len(v),
                "mean_wait_s": sum(w for w, _ in v) / len(v),
                "mean_exec_s": sum(r - w for w, r in v) / len(v),
                "mean_response_s": sum(r for _, r in v) / len(v),
            }
            for c, v in per.items()
        },
        "given_up": given_up,
        "unmatched_app": {
            "count": len(unmatched),
            "dropped": sum(r[3] == "dropped" for r in unmatched),
            "app_s": sum(r[2] for r in unmatched),
        },
        "app_busy_s": busy,
    }


def _read_app_log(
    app_log: Path, started_unix_s: float
) -> tuple[dict[str, list[list]], dict[str, list[float]]]:
    """The bookstore's rows per path, in seconds since the load generator started (by the
    bookstore's clock: the offset is estimated later), sorted by end:
    ``[finish, arrive, service, outcome, used]``; and each path's finishes, for bisection."""
    app: dict[str, list[list]] = defaultdict(list)
    with open(app_log, newline="") as f:
        for row in csv.DictReader(f):
            arrive = float(row["arrived_unix_s"]) - started_unix_s
            svc = float(row["service_s"])
            # [finish, arrive, service, outcome, used]
            app[row["path"]].append([arrive + svc, arrive, svc, row["outcome"], False])
    for rows in app.values():
        rows.sort()
    finishes = {p: [r[0] for r in rows] for p, rows in app.items()}
    return app, finishes


def _read_browser_log(
    requests_csv: Path,
) -> tuple[list[tuple[float, float, float, str]], list[tuple[float, float, str]]]:
    """The browsers' successful requests ``(first byte, start, done, path)`` and those they
    gave up on ``(start, done, path)``."""
    ok: list[tuple[float, float, float, str]] = []  # (first byte, start, done, path)
    gave_up: list[tuple[float, float, str]] = []  # (start, done, path)
    with open(requests_csv, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("done_s"):
                continue
            start, done = float(row["start_s"]), float(row["done_s"])
            path = row["path"].split("?", 1)[0]
            # Matched over the whole log, so that requests outside the window take their own
            # bookstore rows; reported for the window only.
            if row["outcome"] == "ok" and row["status"] == "200" and row.get("first_byte_s"):
                ok.append((float(row["first_byte_s"]), start, done, path))
            elif row["outcome"] == "timeout":
                gave_up.append((start, done, path))
    return ok, gave_up


def _clock_offset(ok: list[tuple[float, float, float, str]], finishes: dict[str, list[float]]) -> float:
    # The clocks' offset: the most common gap between a browser's first byte and any bookstore
    # end of the same path within 0.1 s (0.25 ms bins). Pairs of different requests spread evenly
    # over the gaps; the true pairs pile up at one gap (offset + relay). The nearest end alone
    # would not do: with dense requests, nearest-neighbour gaps pile up at zero.
    bins: dict[int, int] = defaultdict(int)
    pair_gaps: list[float] = []
    for fb, _, _, path in ok:
        fs = finishes.get(path, [])
        for j in range(bisect.bisect_left(fs, fb - 0.1), len(fs)):
            if fs[j] > fb + 0.1:
                break
            g = fb - fs[j]
            bins[math.floor(g / 0.00025)] += 1
            pair_gaps.append(g)
    offset = 0.0
    if bins:
        peak = (max(bins, key=lambda k: (bins[k], -k)) + 0.5) * 0.00025
        near = sorted(g for g in pair_gaps if abs(g - peak) <= 0.0005)
        offset = near[len(near) // 2]
    return offset


def _match_successes(
    ok: list[tuple[float, float, float, str]],
    app: dict[str, list[list]],
    finishes: dict[str, list[float]],
    offset: float,
    warmup_s: float,
    end_s: float,
    tolerance_s: float,
    relay_s: float,
) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """Each successful browser request matched to its bookstore row (marked used); per
    interaction, ``(wait, response)`` of those that ended in the window, and how many."""
    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    matched = 0
    for fb, start, done, path in sorted(ok):
        fs, rows = finishes.get(path), app.get(path)
        if not fs:
            continue
        t = fb - offset
        # The bookstore's end precedes the first byte by the relay: at most relay_s more than the
        # typical relay, and no more than a bin's width less.
        lo = bisect.bisect_left(fs, t - relay_s)
        best = None
        for j in range(lo, len(fs)):
            if fs[j] > t + tolerance_s:
                break
            r = rows[j]
            if r[4] or r[3] != "done" or r[1] + offset < start - tolerance_s:
                continue
            if best is None or abs(fs[j] - t) < abs(fs[best] - t):
                best = j
        if best is None:
            continue
        rows[best][4] = True
        if not (warmup_s <= done <= end_s):
            continue
        matched += 1
        # exec is the bookstore's own handler time (one clock, no offset in it) plus the browser's
        # read after its first byte; wait is the rest. Taking the bookstore's start through the
        # estimated offset instead let a cheap page whose relay was shorter than the typical one
        # look as if it started after the browser's last byte: exec clamped to 0.
        response = done - start
        exec_s = min(response, rows[best][2] + max(0.0, done - fb))
        per[PATH_TO_CODE.get(path, "OTHER")].append((response - exec_s, response))
    return per, matched


def _match_given_up(
    gave_up: list[tuple[float, float, str]],
    app: dict[str, list[list]],
    offset: float,
    warmup_s: float,
    end_s: float,
    tolerance_s: float,
) -> dict:
    """What became of the requests whose browser gave up (the ``given_up`` record)."""
    g_per: dict[str, dict] = defaultdict(lambda: {"count": 0, "reached_app": 0, "app_s": 0.0, "wait_s": []})
    reached = dropped = 0
    n_gave_up = sum(warmup_s <= done <= end_s for _, done, _ in gave_up)
    app_s = 0.0
    # A given-up request reached the bookstore if a still unmatched bookstore request of its path
    # began while its browser waited (between its send and its timeout), earliest deadline first.
    for start, done, path in sorted(gave_up, key=lambda g: g[1]):
        rows = app.get(path, [])
        cands = [r for r in rows if not r[4] and start - tolerance_s <= r[1] + offset <= done + tolerance_s]
        r = min(cands, key=lambda r: r[1]) if cands else None
        if r is not None:
            r[4] = True
        if not (warmup_s <= done <= end_s):
            continue
        e = g_per[PATH_TO_CODE.get(path, "OTHER")]
        e["count"] += 1
        if r is None:
            continue
        reached += 1
        e["reached_app"] += 1
        e["app_s"] += r[2]
        e["wait_s"].append(r[1] + offset - start)
        app_s += r[2]
        dropped += r[3] == "dropped"
    return {
        "count": n_gave_up,
        "reached_app": reached,
        "dropped": dropped,
        "app_s": app_s,
        "per_interaction": {
            c: {
                "count": e["count"],
                "reached_app": e["reached_app"],
                "app_s": e["app_s"],
                "mean_wait_s": sum(e["wait_s"]) / len(e["wait_s"]) if e["wait_s"] else None,
            }
            for c, e in g_per.items()
        },
    }


def apply_join(point: dict, joined: dict) -> None:
    """Replaces a point's per-interaction ``mean_wait_s`` / ``mean_exec_s`` / ``mean_response_s``
    with the joined figures (the same successful requests for all three), keeping the gatekeeper's
    own per-type means as ``gate_mean_wait_s`` / ``gate_mean_exec_s`` (every admitted request of
    the whole run, given-up ones included), and stores the rest of the join under ``joined``."""
    per = point.setdefault("per_interaction", {})
    for e in per.values():
        for key in ("mean_wait_s", "mean_exec_s"):
            if key in e and "gatekeeper_cancelled_while_queued" in point:
                e[f"gate_{key}"] = e[key]
            e.pop(key, None)
    for code, j in joined["per_interaction"].items():
        e = per.setdefault(code, {})
        e.update(
            {
                "joined_count": j["count"],
                "mean_wait_s": j["mean_wait_s"],
                "mean_exec_s": j["mean_exec_s"],
                "mean_response_s": j["mean_response_s"],
            }
        )
    point["joined"] = {k: v for k, v in joined.items() if k != "per_interaction"}


def timeline_stats(path: Path, from_s: float = 0.0) -> dict:
    """From a point's ``timeline.csv``, samples from ``from_s`` on (e.g. after the warm-up: before a
    type's first sample its charge is the costliest type's): the samples taken and, per request
    type, its largest learned cost, the seconds during which it was at or above the capacity, and
    the longest span during which its learned cost did not change (``longest_unchanged_s``: no
    sample completed then). Under the paper's rule a type at or above the capacity runs only when
    nothing else is admitted (``Gate``: "Empty system"), and under SJF any type priced behind the
    work that fills the gate is not admitted at all: it yields no new cost samples and its
    estimate stays where it is, unless the estimator re-samples it (core::admission,
    "Re-sampling": a probe every ``resample_after``, 5 s by default)."""
    by_t: dict[float, dict[str, float]] = defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = row["type"] or row["series"]
            if float(row["t_s"]) >= from_s:
                by_t[float(row["t_s"])][key] = float(row["value"])
    times = sorted(by_t)
    step = {t: (b - t) for t, b in zip(times, times[1:], strict=False)}
    at_capacity: dict[str, float] = defaultdict(float)
    max_cost: dict[str, float] = {}
    # Per type: (value, time it took that value) of the current run, and the longest run so far.
    run: dict[str, tuple[float, float]] = {}
    unchanged: dict[str, float] = {}
    for t in times:
        sample = by_t[t]
        cap = sample.get("gatekeeper_capacity_seconds")
        for key, value in sample.items():
            if key.startswith("gatekeeper_") or key == "(other)":
                continue
            max_cost[key] = max(max_cost.get(key, 0.0), value)
            if cap and value >= cap and t in step:
                at_capacity[key] += step[t]
            if key not in run or run[key][0] != value:
                run[key] = (value, t)
            unchanged[key] = max(unchanged.get(key, 0.0), t - run[key][1])
    return {
        "samples": len(times),
        "max_cost_s": max_cost,
        "at_or_above_capacity_s": dict(at_capacity),
        "longest_unchanged_s": unchanged,
    }
