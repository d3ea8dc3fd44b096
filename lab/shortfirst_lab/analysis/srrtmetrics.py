"""How well srrt's estimate predicted the response time, from a run's `server_metrics.txt`.

The server (`serve --policy srrt`) keeps, on its admin endpoint, a histogram of
``ratio = estimated / measured`` per completed response (``shortfirst_srrt_estimate_ratio``):

- estimated: the remaining response time estimated at the response's start from one
  `TCP_INFO` read (the estimate that chose its first band);
- measured: the server's time from that start to the response's last byte written, plus half
  the path's `min_rtt` (the last byte's one-way trip);
- buckets: cumulative counts at ``le`` bounds 0.125, 0.25, 0.5, 0.8, 1, 1.25, 2, 4, 8, +Inf.

The bounds pair up around 1 (0.8 and 1.25, 0.5 and 2, 0.25 and 4, 0.125 and 8), so the
error *factor* ``max(ratio, 1/ratio)`` has an exact distribution at 1.25, 2, 4 and 8: the
fraction of estimates within a factor f is ``N(ratio <= f) - N(ratio <= 1/f)`` (a ratio
exactly on the lower bound, 1/f, counts as outside). Quantiles (median, p90) of the ratio and
of the factor fall inside a bucket; they are interpolated linearly in log(ratio) within it and
reported with the bucket's bounds, since the data cannot place them more precisely. A
quantile in the open top bucket (factor above 8) has no upper bound: it is None, with the
bounds saying so.

What the histogram cannot give (say so where it is reported): it is one histogram per run,
from the server's start to the scrape after the run (warm-up and drain included, not only the
measurement window); it is not per client group or per request (no log carries the estimate of
a request), so accuracy by group and the error of a given request are not available; and
measured is the server's view, which misses the bytes still queued in the socket at the last
write.

The run's other srrt counters are carried beside: band changes by cause, demotions held,
`TCP_INFO` reads and failures.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..kit import KitError, LabError, parse_prometheus

RATIO_METRIC = "shortfirst_srrt_estimate_ratio"
#: Error factors whose fraction is exact with the server's bounds.
FACTORS = (1.25, 2.0, 4.0, 8.0)
LIMITS = (
    "One histogram per run (server start to the scrape after the run, warm-up and drain "
    "included); not per group or per request: no log carries a request's estimate. Measured is "
    "the server's view (start to last byte written + min_rtt/2). Quantiles are interpolated "
    "inside the server's ratio buckets (bounds 0.125, 0.25, 0.5, 0.8, 1, 1.25, 2, 4, 8)."
)


class MetricsError(LabError, ValueError):
    """A server_metrics.txt whose srrt series cannot be read (names the file and why)."""


def ratio_histogram(text: str) -> list[tuple[float, int]] | None:
    """``[(le, cumulative count), ...]`` sorted by bound, +Inf last; None without the series.

    Raises MetricsError on a malformed text or a histogram that is not cumulative.
    """
    try:
        samples = parse_prometheus(text)
    except KitError as e:
        raise MetricsError(str(e)) from None
    buckets = []
    for s in samples:
        if s.name == RATIO_METRIC + "_bucket":
            if "le" not in s.labels:
                raise MetricsError(f"{s.key}: a bucket without an le label")
            try:
                le = float(s.labels["le"])
            except ValueError:
                raise MetricsError(f"{s.key}: le is not a number") from None
            buckets.append((le, s.value))
    if not buckets:
        return None
    buckets.sort()
    if not math.isinf(buckets[-1][0]):
        raise MetricsError(f"{RATIO_METRIC}: no +Inf bucket")
    counts = [c for _, c in buckets]
    if any(b < a for a, b in zip(counts, counts[1:], strict=False)):
        raise MetricsError(f"{RATIO_METRIC}: bucket counts decrease with the bound: {buckets}")
    return [(le, int(c)) for le, c in buckets]


def ratio_quantile(hist: list[tuple[float, int]], q: float) -> tuple[float | None, float, float]:
    """(interpolated value, bucket low bound, bucket high bound) of the ratio's q-quantile.

    The first bucket runs from 0 (its value is its bound's share of the way, linear); in the
    +Inf bucket the value is None and the high bound inf.
    """
    total = hist[-1][1]
    target = q * total
    lo_b, lo_c = 0.0, 0
    for le, c in hist:
        if c >= target and c > lo_c:
            if math.isinf(le):
                return None, lo_b, math.inf
            t = (target - lo_c) / (c - lo_c)
            v = le * t if lo_b <= 0 else lo_b * (le / lo_b) ** t
            return v, lo_b, le
        lo_b, lo_c = le, c
    return None, lo_b, math.inf


def factor_quantile(hist: list[tuple[float, int]], q: float) -> tuple[float | None, float, float]:
    """(interpolated value, low bound, high bound) of the q-quantile of max(ratio, 1/ratio).

    The factor's distribution is known at 1 (taken as 0: a ratio of exactly 1 is not
    distinguishable from one just above) and at each of FACTORS; interpolated in log between.
    """
    total = hist[-1][1]
    pts = [(1.0, 0.0)] + [(f, within_factor(hist, f) * total) for f in FACTORS]
    target = q * total
    for (f0, n0), (f1, n1) in zip(pts, pts[1:], strict=False):
        if n1 >= target and n1 > n0:
            t = (target - n0) / (n1 - n0)
            return f0 * (f1 / f0) ** t, f0, f1
    return None, FACTORS[-1], math.inf


def _count_le(hist: list[tuple[float, int]], bound: float) -> int:
    for le, c in hist:
        if math.isclose(le, bound, rel_tol=1e-9):
            return c
    raise MetricsError(f"{RATIO_METRIC}: no bucket at {bound:g} (the server's bounds changed?)")


def within_factor(hist: list[tuple[float, int]], factor: float) -> float:
    """Fraction of estimates with 1/factor < ratio <= factor (both must be bucket bounds)."""
    total = hist[-1][1]
    return (_count_le(hist, factor) - _count_le(hist, 1.0 / factor)) / total if total else math.nan


def _counter(samples: list[Any], name: str) -> float | None:
    for s in samples:
        if s.name == name:
            return s.value
    return None


def accuracy(text: str) -> dict[str, Any] | None:
    """The estimate's accuracy and the srrt counters from one metrics text; None when the text
    has no srrt histogram (another policy's run, or a failed scrape)."""
    hist = ratio_histogram(text)
    if hist is None:
        return None
    samples = parse_prometheus(text)
    total = hist[-1][1]
    out: dict[str, Any] = {
        "responses": total,
        "ratio_buckets": [["+Inf" if math.isinf(le) else le, c] for le, c in hist],
        "band_changes": {
            s.labels.get("cause", ""): int(s.value)
            for s in samples
            if s.name == "shortfirst_srrt_band_changes_total"
        },
    }
    for key, name in (
        ("demotions_held", "shortfirst_srrt_demotions_held_total"),
        ("tcp_info_reads", "shortfirst_srrt_tcp_info_reads_total"),
        ("tcp_info_errors", "shortfirst_srrt_tcp_info_errors_total"),
    ):
        v = _counter(samples, name)
        out[key] = int(v) if v is not None else None
    est = _counter(samples, "shortfirst_srrt_estimated_seconds_sum")
    meas = _counter(samples, "shortfirst_srrt_measured_seconds_sum")
    out["mean_estimated_s"] = est / total if est is not None and total else None
    out["mean_measured_s"] = meas / total if meas is not None and total else None
    out["ratio_of_sums"] = est / meas if est is not None and meas else None
    if out["tcp_info_reads"] is not None and total:
        out["tcp_info_reads_per_response"] = out["tcp_info_reads"] / total
    if not total:
        return out
    out["fraction_underestimated"] = _count_le(hist, 1.0) / total
    for f in FACTORS:
        out[f"within_factor_{f:g}"] = within_factor(hist, f)
    for q in (0.5, 0.9):
        v, lo, hi = ratio_quantile(hist, q)
        out[f"p{round(q * 100)}_ratio"] = v
        out[f"p{round(q * 100)}_ratio_bounds"] = [lo, None if math.isinf(hi) else hi]
        v, lo, hi = factor_quantile(hist, q)
        out[f"p{round(q * 100)}_error_factor"] = v
        out[f"p{round(q * 100)}_error_factor_bounds"] = [lo, None if math.isinf(hi) else hi]
    return out


def run_accuracy(run_dir: Path) -> dict[str, Any] | None:
    """`accuracy` of DIR/runs/<run>/server_metrics.txt; None when absent or without srrt series."""
    p = run_dir / "server_metrics.txt"
    if not p.exists():
        return None
    try:
        return accuracy(p.read_text())
    except MetricsError as e:
        raise MetricsError(f"{p}: {e}") from None
