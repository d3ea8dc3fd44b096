"""One run's figures from the generator's requests.csv: throughput, work per second, the two
accountings of response time (full and the paper's), Little's law for closed loops.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def summarize(
    run_dir: Path,
    warmup_s: float,
    duration_s: float,
    wall_s: float,
    timeout_s: float,
    cost_ms: Callable[[str], float],
    type_of: Callable[[str], str],
) -> dict:
    """Throughput and response times from requests.csv.

    A request's type and base cost come from its path, as the backend says: `type_of` (path
    → type name) and `cost_ms` (path → cost in ms: the synthetic upstream's Table 1 cost
    times its scale, a foreign backend's type's cost measured alone).

    - Throughput: responses completed (200) inside the measurement window
      [warmup, duration], whenever they were sent, per second of window. Cost-weighted
      throughput: the same completions weighted by their type's base cost (the backend's
      work, in seconds), per second: backend work done per second (on the synthetic
      upstream at most --cpus, when every processor serves useful work).
    - Response times: requests *scheduled* inside the window. A request that timed out (or
      never completed) counts with its timeout as response time, a lower bound of the truth,
      in `mean_response_ms` (and per type); `mean_response_ms_completed` is over completed
      requests only. Dropping timeouts would hide exactly the requests a policy starves.
    """
    with open(run_dir / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    window = max(duration_s - warmup_s, 1e-9)
    t = _Tally(warmup_s, duration_s, timeout_s, cost_ms, type_of)
    for r in rows:
        t.add(r)

    littles = littles_law(t.by_client, warmup_s, duration_s)

    ordered = sorted(t.rts)
    return {
        "accounting": _accounting(
            t.rts, t.rts_done, t.done_in_window / window, t.timeouts, t.errors, timeout_s
        ),
        "littles_law": littles,
        "throughput_per_s": t.done_in_window / window,
        "median_response_ms": 1e3 * ordered[len(ordered) // 2] if ordered else None,
        "work_per_s": t.work_s / window,
        "mean_response_ms": mean_ms(t.rts),
        "mean_response_ms_completed": mean_ms(t.rts_done),
        "requests": len(t.rts),
        "timeouts": t.timeouts,
        "errors": t.errors,
        "per_type": {k: _type_summary(v) for k, v in sorted(t.per_type.items())},
        "wall_s": wall_s,
    }


#: Outcomes where the user gave up: counted at the client timeout.
_GAVE_UP = ("timeout", "aborted")


@dataclass
class _Tally:
    """requests.csv's rows added up for `summarize` (which says what counts where)."""

    warmup_s: float
    duration_s: float
    timeout_s: float
    cost_ms: Callable[[str], float]
    type_of: Callable[[str], str]
    done_in_window: float = 0.0
    work_s: float = 0.0
    rts: list[float] = field(default_factory=list)
    rts_done: list[float] = field(default_factory=list)
    per_type: dict[str, dict] = field(default_factory=dict)
    timeouts: int = 0
    errors: int = 0
    #: Per client, (scheduled send, end) of each of its requests: for Little's law.
    by_client: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, r: dict[str, str]) -> None:
        name = self.type_of(r["path"])
        sched = float(r["scheduled_s"] or 0)
        done = r.get("done_s") or ""
        ok = r["outcome"] == "ok" and r["status"] == "200" and done != ""
        if ok and self.warmup_s <= float(done) <= self.duration_s:
            self.done_in_window += 1
            self.work_s += self.cost_ms(r["path"]) / 1e3
        # When the user was free again: the response, the error, or giving up.
        end = float(done) if done != "" else sched + self.timeout_s
        self.by_client.setdefault(r.get("client", ""), []).append((sched, end))
        if not (self.warmup_s <= sched < self.duration_s):
            return
        if ok:
            rt = float(done) - sched
            self.rts_done.append(rt)
        elif r["outcome"] in _GAVE_UP:
            rt = self.timeout_s
            self.timeouts += 1
        else:
            # Refused, reset, 5xx: the time the user waited for the failure.
            self.errors += 1
            rt = end - sched
        self.rts.append(rt)
        t = self.per_type.setdefault(name, {"rts": [], "rts_ok": [], "timeouts": 0, "errors": 0})
        t["rts"].append(rt)
        if ok:
            t["rts_ok"].append(rt)
        t["timeouts"] += 1 if r["outcome"] in _GAVE_UP else 0
        t["errors"] += 0 if ok or r["outcome"] in _GAVE_UP else 1


def _type_summary(v: dict) -> dict:
    """One request type's counts and mean response times, from its `_Tally.per_type` entry."""
    return {
        "n": len(v["rts"]),
        "completed": len(v["rts_ok"]),
        "timeouts": v["timeouts"],
        "errors": v["errors"],
        "mean_response_ms": mean_ms(v["rts"]),
        "mean_response_ms_successful": mean_ms(v["rts_ok"]),
    }


def mean_ms(v: list[float]) -> float | None:
    return 1e3 * sum(v) / len(v) if v else None


def _accounting(
    rts: list[float],
    rts_done: list[float],
    throughput_per_s: float,
    timeouts: int,
    errors: int,
    timeout_s: float,
) -> dict:
    """The two accountings of the same requests, each with its definition."""
    return {
        "full": {
            "mean_response_ms": mean_ms(rts),
            "requests": len(rts),
            "definition": "every request scheduled in the window: completed ones at their "
            "response time, errors at the time they took, timed-out ones at the client "
            "timeout (a lower bound: the user gave up then)",
        },
        "paper": {
            "mean_response_ms": mean_ms(rts_done),
            "throughput_per_s": throughput_per_s,
            "requests": len(rts_done),
            "excluded_timeouts": timeouts,
            "excluded_errors": errors,
            "timeout_s": timeout_s,
            "definition": "successful requests only (Elnikety et al. 2004, section 4: failed "
            "or timed-out requests are in neither throughput nor response time)",
        },
    }


def littles_law(by_client: dict[str, list[tuple[float, float]]], warmup_s: float, duration_s: float) -> dict:
    """Little's law for a closed loop, from the logs: `by_client` holds each user's requests
    as (scheduled send, end); every request that ended in the window (any outcome) is one
    cycle of a user: respond (R), then think (Z) until the next send."""
    window = max(duration_s - warmup_s, 1e-9)
    ended = [(sch, end) for reqs in by_client.values() for sch, end in reqs if warmup_s <= end < duration_s]
    thinks = []

    def clipped(a: float, b: float) -> float:
        return max(0.0, min(b, duration_s) - max(a, warmup_s))

    waiting_s = thinking_s = 0.0
    for reqs in by_client.values():
        reqs.sort()
        for (_, end), (next_sched, _) in zip(reqs, reqs[1:], strict=False):
            if warmup_s <= end < duration_s:
                thinks.append(max(0.0, next_sched - end))
            thinking_s += clipped(end, next_sched)
        waiting_s += sum(clipped(sch, end) for sch, end in reqs)
    x_all = len(ended) / window
    r_all = sum(e - s for s, e in ended) / len(ended) if ended else 0.0
    z = sum(thinks) / len(thinks) if thinks else 0.0
    littles = {
        "x_per_s": x_all,
        "r_s": r_all,
        "z_s": z,
        "n_from_logs": x_all * (r_all + z),
        "waiting_avg": waiting_s / window,
        "thinking_avg": thinking_s / window,
        "definition": "X = requests that ended in the window (any outcome) per second; R = their "
        "mean time from scheduled send to end (response, error, or giving up); Z = mean time "
        "from a user's request ending to its next send. Closed loop: N = X (R + Z). "
        "waiting_avg / thinking_avg: time-average number of users waiting / thinking in the "
        "window (their sum is N up to the generator's lateness). X R falls short of "
        "waiting_avg when requests outlast the window (they end after it), so a ratio well "
        "below 1 means the window is too short for the longest waits, not a broken loop.",
    }
    return littles
