"""Analysis of per-request logs: response times, slowdown, size buckets, stretch, comparisons.

Pure functions on pandas/numpy data; no I/O except `read_requests`/`read_received`/`read_health`. The same
code serves measured runs (`shortfirst load`) and simulated ones (`shortfirst sim`), which
write the same `requests.csv` columns.

Definitions (the papers' where they have one):

- Response time of a request: `done_s − start_s`, from the moment the client started the
  connection (SYN sent) to the last byte received — Harchol-Balter 2003 §3.1.5. The
  generator's own delay (`start_s − scheduled_s`, its lateness) is reported separately and a
  run whose lateness p99 exceeds 5 ms is marked invalid by the generator.
- Measurement window: requests *scheduled* in `[warmup_s, duration_s)`. Selecting by
  scheduled time (not completion) keeps the same request set for every policy on the same
  trace and seed, which is what makes per-request comparisons (stretch) meaningful.
- Only requests with outcome `ok` have a response time; the others are counted as failed.
- Slowdown: response time ÷ the time the same size takes alone on the idle testbed. The idle
  time comes from a calibration pass (`Baseline`): a ladder of file sizes spanning the trace's
  smallest to largest (log-spaced, actual files), each fetched alone several times; the
  per-size median is the idle time at that size, and between ladder sizes it is interpolated
  linearly in log(size)–log(time) (medians made non-decreasing first). Above the largest
  ladder size it grows at the fitted effective rate; below the smallest it is the smallest's.
  Why interpolation and not a fitted line `a + 8·size/rate_eff`: HTB lets a short transfer
  through at line speed out of its burst allowance (measured here: a 30 KB fetch alone takes
  less than its 10 Mbit/s serialisation time), so a line fitted to the whole ladder misses the
  small sizes — which are most requests and dominate mean slowdown — by a factor of 2–3. The
  line is still fitted and shown in the report (a, rate_eff and each size's residual), as a
  check that the link behaved like a 10 Mbit/s link for large transfers.
- Throughput: bytes received inside `[warmup_s, window_end]` divided by the window length
  (window_end = the last scheduled time, at most duration_s); `throughput_method` says how
  they were counted. "received": from the generator's `received.csv`, the body bytes its reads
  returned per 100 ms bucket, the buckets inside the window counted whole and the two that
  straddle its edges pro rata — what the clients got, when they got it. "spread", for runs
  without that file (older runs, simulated ones): each request's bytes spread evenly over its
  transfer, first byte to done (to the attempt's end for failed ones), and the part inside the
  window counts. Spreading misplaces the bytes of a transfer that straddles an edge of the
  window whenever they did not arrive evenly, and a policy that holds a large response back
  and sends most of it just before it completes (SRPT) has the least even transfers (on a
  10 Mbit/s link at load 0.7 with every request completed, user-space SRPT's spread
  throughput came out 2 % below FAIR's, where the link's own count was within 0.5 %).
  Attributing whole requests to their completion time instead would be biased the
  other way in a finite window, since SRPT finishes the large transfers that straddle the
  window's end later than FAIR does (measured: −20 % in a 13 s window on identical traffic).
- Largest 1 %: the ceil(n/100) largest requests of the window by size (ties broken by id, so
  the set is the same for every policy on the same trace). Largest file: every request for the
  largest size in the window.
- Size percentile buckets (Fig. 9 right): requests sorted by size (ties by id) and cut into
  200 groups of equal count (0.5 % each); mean response per group.
- Size bins (Fig. 9 left): bins `[x, 1.2x)` starting at the smallest size; mean per non-empty bin.
- Starvation stretch (SRRT paper): S(r) = RT_policy(r) / RT_fair(r) per request id, over the
  ids completed under both; reported as the fraction with S > 1 and the maximum, beside the
  median and the fractions above 1.25 and 2 (path noise alone puts S above 1 for many requests).
- Confidence interval of a mean: batch means over 10 consecutive batches in schedule order,
  Student t with 9 degrees of freedom. Heavy tails and long busy periods make neighbouring
  response times strongly correlated, so the naive i.i.d. interval would be far too narrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..kit import LabError

REQUEST_COLUMNS = (
    "id",
    "client",
    "path",
    "size_bytes",
    "bytes_received",
    "status",
    "outcome",
    "attempts",
    "scheduled_s",
    "start_s",
    "connected_s",
    "first_byte_s",
    "done_s",
)
_NUMERIC = ("size_bytes", "bytes_received", "scheduled_s", "start_s", "connected_s", "first_byte_s", "done_s")
N_PERCENTILE_BUCKETS = 200
BIN_RATIO = 1.2
CI_BATCHES = 10
#: `received.csv`'s columns: bucket start (s since the run's start) and body bytes in it.
RECEIVED_COLUMNS = ("t_s", "bytes")
#: The generator's bucket width, assumed only for a file of a single bucket.
RECEIVED_BUCKET_S = 0.1
#: A run whose generator sent its requests' p99 more than this many ms late is not valid: the
#: arrivals were not the trace's (every report's rule, where the generator did not say).
LATENESS_LIMIT_MS = 5.0


def lateness_ok(lateness_p99_ms: float | None) -> bool:
    """Whether a run's generator kept to its trace (`LATENESS_LIMIT_MS`); False when unknown."""
    return lateness_p99_ms is not None and lateness_p99_ms <= LATENESS_LIMIT_MS


class LogError(LabError, ValueError):
    """A per-request log that cannot be analysed (names the file and what is wrong)."""


def read_requests(path: str | Path) -> pd.DataFrame:
    """Read a `requests.csv`; checks the columns and types, adds `response_s`."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"path": str, "outcome": str}, keep_default_na=False, na_values=[""])
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise LogError(f"{path}: cannot read as CSV: {e}") from e
    missing = [c for c in REQUEST_COLUMNS if c not in df.columns]
    if missing:
        raise LogError(f"{path}: missing columns {missing}; expected {list(REQUEST_COLUMNS)}")
    for c in _NUMERIC:
        converted = pd.to_numeric(df[c], errors="coerce")
        bad = converted.isna() & df[c].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # 1-based, after the header
            raise LogError(f"{path}: line {row}: column {c}: expected a number, got {df[c].iloc[row - 2]!r}")
        df[c] = converted
    return with_response_times(df)


@dataclass(frozen=True)
class Received:
    """A run's `received.csv`: body bytes per bucket, buckets `bucket_s` wide from `t_s`."""

    t_s: np.ndarray
    bytes: np.ndarray
    bucket_s: float

    def bytes_between(self, lo_s: float, hi_s: float) -> float:
        """Bytes received in [lo_s, hi_s]: buckets inside whole, a bucket straddling an edge
        in proportion to the part of it inside."""
        overlap = np.clip(np.minimum(self.t_s + self.bucket_s, hi_s) - np.maximum(self.t_s, lo_s), 0.0, None)
        return float((self.bytes * overlap / self.bucket_s).sum())


def read_received(path: str | Path) -> Received | None:
    """A run's `received.csv` (written by `shortfirst load`), or None when the run has none.

    Checks the columns, that they are numbers, and that the buckets are evenly spaced (the
    generator writes one row per bucket, zeros included): the spacing is the bucket width."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise LogError(f"{path}: cannot read as CSV: {e}") from e
    missing = [c for c in RECEIVED_COLUMNS if c not in df.columns]
    if missing:
        raise LogError(f"{path}: missing columns {missing}; expected {list(RECEIVED_COLUMNS)}")
    cols = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float) for c in RECEIVED_COLUMNS}
    bad = np.flatnonzero(np.isnan(cols["t_s"]) | np.isnan(cols["bytes"]))
    if bad.size:
        raise LogError(f"{path}: line {int(bad[0]) + 2}: expected numbers in t_s and bytes")
    if len(df) == 0:
        raise LogError(f"{path}: no buckets")
    steps = np.diff(cols["t_s"])
    width = float(steps[0]) if steps.size else RECEIVED_BUCKET_S
    if width <= 0 or not np.allclose(steps, width, rtol=0.0, atol=1e-6):
        raise LogError(f"{path}: buckets are not evenly spaced (expected one row per bucket)")
    return Received(cols["t_s"], cols["bytes"], width)


def with_response_times(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    ok = df["outcome"].eq("ok") & df["done_s"].notna() & df["start_s"].notna()
    df["response_s"] = np.where(ok, df["done_s"] - df["start_s"], np.nan)
    return df


def window(df: pd.DataFrame, warmup_s: float, duration_s: float) -> pd.DataFrame:
    """Requests scheduled in [warmup_s, duration_s)."""
    m = (df["scheduled_s"] >= warmup_s) & (df["scheduled_s"] < duration_s)
    return df[m]


# --------------------------------------------------------------------------- baseline


@dataclass
class Baseline:
    """Idle-system response time per size (see the module doc).

    With a ladder (`sizes_bytes`, `median_s`): log-log interpolation between the ladder's
    medians, the fitted rate above it. Without: the line `a_s + 8·size / rate_eff_bits_per_s`.
    """

    a_s: float
    rate_eff_bits_per_s: float
    sizes_bytes: list[int] = field(default_factory=list)
    median_s: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)

    def line(self, size_bytes: Any) -> np.ndarray:
        """The fitted line a_s + 8·size / rate_eff."""
        return self.a_s + 8.0 * np.asarray(size_bytes, dtype=float) / self.rate_eff_bits_per_s

    def predict(self, size_bytes: Any) -> np.ndarray:
        s = np.asarray(size_bytes, dtype=float)
        if len(self.sizes_bytes) < 2:
            return self.line(s)
        xs = np.log(np.asarray(self.sizes_bytes, dtype=float))
        mono = np.maximum.accumulate(np.asarray(self.median_s, dtype=float))
        inside = np.exp(np.interp(np.log(np.maximum(s, 1.0)), xs, np.log(mono)))
        top = float(self.sizes_bytes[-1])
        above = mono[-1] + 8.0 * (s - top) / self.rate_eff_bits_per_s
        return np.where(s > top, above, inside)

    def residuals(self) -> np.ndarray:
        """Relative residual of each ladder median against the fitted line."""
        if not self.sizes_bytes:
            return np.array([])
        pred = self.line(self.sizes_bytes)
        return (np.asarray(self.median_s) - pred) / pred

    def to_dict(self) -> dict[str, Any]:
        res = self.residuals()
        return {
            "model": "log-log interpolation of per-size medians; line a_s + 8*size/rate_eff (least squares) "
            "above the ladder and as a check",
            "a_s": self.a_s,
            "rate_eff_bits_per_s": self.rate_eff_bits_per_s,
            "sizes_bytes": list(self.sizes_bytes),
            "median_s": list(self.median_s),
            "samples": list(self.samples),
            "relative_residuals": [float(x) for x in res],
            "max_abs_relative_residual": float(np.max(np.abs(res))) if res.size else None,
        }


def fit_baseline(size_bytes: Any, response_s: Any) -> Baseline:
    """Fit the idle baseline from calibration fetches (several per size; medians are fitted).

    Medians rather than means: an occasional hiccup of the shared machine during calibration
    should not inflate every slowdown. Raises ValueError with fewer than two distinct sizes or
    a non-positive fitted rate (which would mean the calibration did not measure a link).
    """
    df = pd.DataFrame({"s": np.asarray(size_bytes, dtype=float), "t": np.asarray(response_s, dtype=float)})
    df = df.dropna()
    g = df.groupby("s")["t"].agg(["median", "count"]).reset_index()
    if len(g) < 2:
        raise ValueError("baseline needs fetches of at least two distinct sizes")
    x = g["s"].to_numpy() * 8.0
    y = g["median"].to_numpy()
    slope, intercept = np.polyfit(x, y, 1)
    if slope <= 0:
        raise ValueError(
            f"baseline fit has a non-positive slope ({slope:g} s/bit): calibration did not see the link"
        )
    return Baseline(
        a_s=float(max(intercept, 0.0)),
        rate_eff_bits_per_s=float(1.0 / slope),
        sizes_bytes=[int(s) for s in g["s"]],
        median_s=[float(t) for t in y],
        samples=[int(c) for c in g["count"]],
    )


# --------------------------------------------------------------------------- per run


def batch_means_ci(values_in_order: Any, n_batches: int = CI_BATCHES) -> float | None:
    """Half-width of the 95 % confidence interval of the mean by batch means, or None."""
    v = np.asarray(values_in_order, dtype=float)
    v = v[~np.isnan(v)]
    if v.size < 2 * n_batches:
        return None
    means = np.array([b.mean() for b in np.array_split(v, n_batches)])
    sd = means.std(ddof=1)
    return float(stats.t.ppf(0.975, n_batches - 1) * sd / math.sqrt(n_batches))


def largest_fraction(df: pd.DataFrame, fraction: float = 0.01) -> pd.DataFrame:
    """The ceil(n·fraction) largest requests by size (ties broken by id)."""
    if df.empty:
        return df
    k = max(1, math.ceil(len(df) * fraction))
    return df.sort_values(["size_bytes", "id"], ascending=[False, True], kind="mergesort").head(k)


def json_safe(x: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, tuples → lists (recursively)."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def run_metrics(
    df: pd.DataFrame,
    warmup_s: float,
    duration_s: float,
    baseline: Baseline | None,
    received: Received | None = None,
) -> dict[str, Any]:
    """Metrics of one run over its measurement window (see the module doc for definitions);
    throughput from `received` (the run's `read_received`) when given, else spread."""
    w = window(df, warmup_s, duration_s)
    ok = w[w["response_s"].notna()]
    rt = ok["response_s"].to_numpy()
    out: dict[str, Any] = {
        "requests": int(len(w)),
        "completed": int(len(ok)),
        "failed": int(len(w) - len(ok)),
        "outcomes": {str(k): int(v) for k, v in w["outcome"].value_counts().sort_index().items()},
    }
    if rt.size:
        out.update(
            mean_response_s=float(rt.mean()),
            p50_response_s=float(np.percentile(rt, 50)),
            p90_response_s=float(np.percentile(rt, 90)),
            p99_response_s=float(np.percentile(rt, 99)),
            max_response_s=float(rt.max()),
        )
    else:
        out.update(
            mean_response_s=None,
            p50_response_s=None,
            p90_response_s=None,
            p99_response_s=None,
            max_response_s=None,
        )
    in_order = ok.sort_values("scheduled_s", kind="mergesort")
    out["mean_response_ci95_s"] = batch_means_ci(in_order["response_s"])
    if baseline is not None and rt.size:
        sd = in_order["response_s"].to_numpy() / baseline.predict(in_order["size_bytes"])
        out["mean_slowdown"] = float(sd.mean())
        out["p50_slowdown"] = float(np.percentile(sd, 50))
        out["mean_slowdown_ci95"] = batch_means_ci(sd)
    else:
        out["mean_slowdown"] = None
        out["p50_slowdown"] = None
        out["mean_slowdown_ci95"] = None

    out.update(throughput(df, warmup_s, duration_s, received))

    top = largest_fraction(ok, 0.01)
    out["largest_1pct_mean_response_s"] = _nan_to_none(top["response_s"].mean()) if len(top) else None
    out["largest_1pct_min_size_bytes"] = int(top["size_bytes"].min()) if len(top) else None
    if len(w):
        max_size = w["size_bytes"].max()
        big = ok[ok["size_bytes"] == max_size]
        out["largest_file_size_bytes"] = int(max_size)
        out["largest_file_requests"] = int((w["size_bytes"] == max_size).sum())
        out["largest_file_mean_response_s"] = _nan_to_none(big["response_s"].mean()) if len(big) else None
    else:
        out["largest_file_size_bytes"] = None
        out["largest_file_requests"] = 0
        out["largest_file_mean_response_s"] = None

    lateness_ms = (w["start_s"] - w["scheduled_s"]).dropna().to_numpy() * 1000.0
    out["lateness_p99_ms_from_log"] = float(np.percentile(lateness_ms, 99)) if lateness_ms.size else None
    return out


def throughput(
    df: pd.DataFrame, warmup_s: float, duration_s: float, received: Received | None = None
) -> dict[str, Any]:
    """`throughput_bytes_per_s` over the window [warmup_s, end] (end: the last scheduled time,
    at most duration_s), `throughput_method` ("received" or "spread") and `window_s`."""
    end_s = min(duration_s, float(df["scheduled_s"].max())) if len(df) else duration_s
    span = end_s - warmup_s
    if received is not None:
        got, method = received.bytes_between(warmup_s, end_s), "received"
    else:
        got, method = bytes_in_window(df, warmup_s, end_s), "spread"
    return {
        "throughput_bytes_per_s": got / span if span > 0 else None,
        "throughput_method": method,
        "window_s": [float(warmup_s), float(end_s)],
    }


def bytes_in_window(df: pd.DataFrame, lo_s: float, hi_s: float) -> float:
    """Bytes received in [lo_s, hi_s], each request's bytes spread evenly over first byte → done."""
    d = df[(df["bytes_received"] > 0) & df["done_s"].notna()]
    if d.empty:
        return 0.0
    end = d["done_s"].to_numpy(dtype=float)
    begin = d["first_byte_s"].fillna(d["start_s"]).to_numpy(dtype=float)
    begin = np.minimum(np.nan_to_num(begin, nan=end), end)
    b = d["bytes_received"].to_numpy(dtype=float)
    dur = end - begin
    overlap = np.clip(np.minimum(end, hi_s) - np.maximum(begin, lo_s), 0.0, None)
    instant = dur <= 0
    frac = np.where(
        instant, ((end >= lo_s) & (end <= hi_s)).astype(float), overlap / np.where(instant, 1.0, dur)
    )
    return float((b * frac).sum())


# --------------------------------------------------------------------------- size views


def percentile_buckets(df: pd.DataFrame, n: int = N_PERCENTILE_BUCKETS) -> pd.DataFrame:
    """Mean response per size-percentile bucket: `n` equal-count groups by size (ties by id).

    Columns: bucket (0..n-1), pct_hi (upper percentile edge, e.g. 0.5, 1.0, ... 100),
    size_lo, size_hi, count, mean_response_s. With fewer than `n` requests some buckets are
    empty and omitted.
    """
    ok = df[df["response_s"].notna()].sort_values(["size_bytes", "id"], kind="mergesort")
    m = len(ok)
    if m == 0:
        return pd.DataFrame(columns=["bucket", "pct_hi", "size_lo", "size_hi", "count", "mean_response_s"])
    # Request i (0-based rank) belongs to bucket floor(i * n / m): equal counts ±1.
    bucket = (np.arange(m) * n) // m
    g = ok.assign(bucket=bucket).groupby("bucket")
    out = pd.DataFrame(
        {
            "size_lo": g["size_bytes"].min(),
            "size_hi": g["size_bytes"].max(),
            "count": g.size(),
            "mean_response_s": g["response_s"].mean(),
        }
    ).reset_index()
    out.insert(1, "pct_hi", (out["bucket"] + 1) * 100.0 / n)
    return out


def size_bins(df: pd.DataFrame, ratio: float = BIN_RATIO) -> pd.DataFrame:
    """Mean response per size bin [lo·ratio^k, lo·ratio^(k+1)), lo = smallest size.

    Columns: bin, size_lo, size_hi (bin edges), count, mean_response_s; empty bins omitted.
    """
    ok = df[df["response_s"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=["bin", "size_lo", "size_hi", "count", "mean_response_s"])
    s = ok["size_bytes"].to_numpy(dtype=float)
    lo = s.min()
    # Small epsilon so a size exactly on an edge lands in the bin it starts, despite rounding.
    k = np.floor(np.log(s / lo) / np.log(ratio) + 1e-9).astype(int)
    g = ok.assign(bin=k).groupby("bin")
    out = pd.DataFrame({"count": g.size(), "mean_response_s": g["response_s"].mean()}).reset_index()
    out.insert(1, "size_lo", lo * ratio ** out["bin"])
    out.insert(2, "size_hi", lo * ratio ** (out["bin"] + 1))
    return out


def ccdf(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(x sorted ascending, P[X > x]) for the non-NaN values."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    n = v.size
    return v, 1.0 - np.arange(1, n + 1) / n if n else np.array([])


# --------------------------------------------------------------------------- comparisons


#: The smallest stretch resolution: a response alone on an idle testbed link varies by this
#: much from run to run whatever the policy (host stalls; decision 0012).
MIN_STRETCH_RESOLUTION_S = 0.001


def stretch_resolution_s(rate_bits_per_s: int, mtu_bytes: int) -> float:
    """δ of `stretch`: one full segment's time on the uplink, at least 1 ms -- below it no
    scheduler can order anything, and two runs of one policy differ by that much."""
    return max(MIN_STRETCH_RESOLUTION_S, mtu_bytes * 8 / rate_bits_per_s)


def stretch(
    policy_df: pd.DataFrame, fair_df: pd.DataFrame, resolution_s: float | None = None
) -> dict[str, Any]:
    """Starvation stretch S(r) = RT_policy(r)/RT_fair(r) over ids completed under both.

    With `resolution_s` (δ) also the stretch beyond the testbed's resolution: the fraction of
    requests slower than under FAIR by more than δ, and the largest RT_policy/(RT_fair + δ).
    S > 1 alone counts a sub-millisecond response that was 0.1 ms slower in one run as starved:
    two runs of one policy put about half of the uncontended requests there."""
    a = policy_df.loc[policy_df["response_s"].notna(), ["id", "response_s"]]
    b = fair_df.loc[fair_df["response_s"].notna(), ["id", "response_s"]]
    j = a.merge(b, on="id", suffixes=("_p", "_f"))
    j = j[j["response_s_f"] > 0]
    if j.empty:
        out: dict[str, Any] = {"matched": 0, "fraction_starved": None, "max_stretch": None}
        if resolution_s is not None:
            out |= {"stretch_resolution_s": resolution_s, "fraction_starved_resolved": None,
                    "max_stretch_resolved": None}  # fmt: skip
        return out
    rt_p, rt_f = j["response_s_p"].to_numpy(), j["response_s_f"].to_numpy()
    s = rt_p / rt_f
    out = {
        "matched": int(len(j)),
        "fraction_starved": float((s > 1.0).mean()),
        "max_stretch": float(s.max()),
        # On a lossy, jittery path S(r) varies from run to run for any policy: these tell
        # starvation from that noise.
        "median_stretch": float(np.median(s)),
        "fraction_stretch_over_1_25": float((s > 1.25).mean()),
        "fraction_stretch_over_2": float((s > 2.0).mean()),
    }
    if resolution_s is not None:
        out |= {
            "stretch_resolution_s": float(resolution_s),
            "fraction_starved_resolved": float((rt_p > rt_f + resolution_s).mean()),
            "max_stretch_resolved": float((rt_p / (rt_f + resolution_s)).max()),
        }
    return out


def ratio(num: float | None, den: float | None) -> float | None:
    """num ÷ den, or None where either is unknown or den is 0."""
    if num is None or den is None or den == 0:
        return None
    return float(num) / float(den)


def compare(policy: dict[str, Any], fair: dict[str, Any], st: dict[str, Any]) -> dict[str, Any]:
    """One comparison row as in the issue: improvement ratios and stretch vs FAIR."""
    return {
        "load": policy["load"],
        "repeat": policy["repeat"],
        "baseline": "fair",
        "policy": policy["policy"],
        "mean_response_ratio": ratio(fair["mean_response_s"], policy["mean_response_s"]),
        "mean_slowdown_ratio": ratio(fair["mean_slowdown"], policy["mean_slowdown"]),
        "throughput_ratio": ratio(policy["throughput_bytes_per_s"], fair["throughput_bytes_per_s"]),
        "link_throughput_ratio": ratio(policy.get("link_bits_per_s"), fair.get("link_bits_per_s")),
        "largest_1pct_ratio": ratio(
            policy["largest_1pct_mean_response_s"], fair["largest_1pct_mean_response_s"]
        ),
        "largest_file_ratio": ratio(
            policy.get("largest_file_mean_response_s"), fair.get("largest_file_mean_response_s")
        ),
        "fraction_starved": st["fraction_starved"],
        "max_stretch": st["max_stretch"],
    }


# --------------------------------------------------------------------------- health


def read_health(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame()
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise LogError(f"{path}: cannot read as CSV: {e}") from e


def link_bits_per_s(h: pd.DataFrame, lo_s: float, hi_s: float) -> float | None:
    """Bits per second the shaped uplink sent in [lo_s, hi_s], from the qdisc's cumulative
    byte counters in the health log (``band_bytes.<band>``, summed over bands): the link's
    own count, headers and retransmissions included, whatever the order responses finish in.
    None without such columns or with fewer than two samples inside the window."""
    cols = [c for c in h.columns if c.startswith("band_bytes.")] if "t_s" in h else []
    if not cols:
        return None
    inside = h[(h["t_s"] >= lo_s) & (h["t_s"] <= hi_s)]
    inside = inside[inside[cols].notna().any(axis=1)]
    if len(inside) < 2:
        return None
    total = inside[cols].fillna(0).sum(axis=1)
    dt = float(inside["t_s"].iloc[-1] - inside["t_s"].iloc[0])
    if dt <= 0:
        return None
    return float(total.iloc[-1] - total.iloc[0]) * 8.0 / dt


def health_summary(h: pd.DataFrame) -> dict[str, Any]:
    """Open connections (mean/max), listen overflows/drops during the run, server CPU use.

    Counters (`listen_overflows`, `listen_drops`, `server_cpu_s`) are cumulative in the log;
    the summary reports their increase over the run and CPU as a fraction of one core.
    """
    if h.empty or "t_s" not in h:
        return {}
    out: dict[str, Any] = {"samples": int(len(h))}
    if "open_connections" in h and h["open_connections"].notna().any():
        out["open_connections_mean"] = float(h["open_connections"].mean())
        out["open_connections_max"] = int(h["open_connections"].max())
    for c in ("listen_overflows", "listen_drops"):
        if c in h and h[c].notna().any():
            col = h[c].dropna()
            out[c] = int(col.iloc[-1] - col.iloc[0])
    if "server_cpu_s" in h and h["server_cpu_s"].notna().sum() >= 2:
        sub = h[["t_s", "server_cpu_s"]].dropna()
        dt = sub["t_s"].iloc[-1] - sub["t_s"].iloc[0]
        if dt > 0:
            out["server_cpu_fraction"] = float(
                (sub["server_cpu_s"].iloc[-1] - sub["server_cpu_s"].iloc[0]) / dt
            )
    return out
