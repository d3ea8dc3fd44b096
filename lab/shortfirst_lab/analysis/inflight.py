"""How many long responses were in transfer at once, from a run's `requests.csv`: what a
scheduler that lets only K responses write (Crovella 1999's write concurrency,
`serve --scheduler crovella`) runs into.

A response holds a writer's slot from its first write until its last byte is written. The
client's log sees neither end; what it sees, per request, is the first byte received and the
last. The slot is approximated by that interval less `tail_s` at its end: the last round trip,
whose bytes were written before the slot freed. A response of at most `min_bytes` (by default
the initial window of ten segments plus the server's 16 KB not-sent allowance) is written at
once, so it holds a slot for one grant and is left out of the count.

Per run, over the measurement window [from_s, to_s):

- `in_transfer`: the time-weighted mean, median, p90 and maximum of the number of completed
  responses larger than `min_bytes` in transfer (whenever they were scheduled; a request that
  failed is not counted), and the fraction of the window in which that number reached
  `limit` (exact: a sweep over the intervals' ends, no sampling); `long_responses` counts
  those whose interval meets the window;
- `short_bytes_share`: the share of the window's body bytes in responses of at most
  `min_bytes`;
- `per_flow_kbit_s`: per size class, each completed response's size over its transfer time
  (first byte to last), as median and quartiles, with the class's count and mean transfer time.

The window defaults to the experiment's `[warmup_s, duration_s)` read from the result
directory's `experiment.toml` (two levels above the run). Requests are selected by the time
they were scheduled, as `analysis.window` does.

    python -m shortfirst_lab inflight results/crovella-saturated/runs/* --tail-s 0.5
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .metrics import LogError, read_requests, window

#: Ten segments of 1,448 bytes and the server's default `--notsent-lowat-bytes` (16 KiB).
DEFAULT_MIN_BYTES = 10 * 1448 + 16 * 1024
#: Crovella 1999 §5.4: 35 network threads.
DEFAULT_LIMIT = 35
#: Size classes of the per-flow rates, bytes: (lo, hi].
RATE_CLASSES = ((30_000, 100_000), (100_000, 300_000), (300_000, None))


def time_weighted(
    starts: np.ndarray, ends: np.ndarray, lo_s: float, hi_s: float, limit: int
) -> dict[str, float]:
    """The number of intervals [start, end) open at a time in [lo_s, hi_s): time-weighted
    mean, median, p90, max and the fraction of time at or above `limit`."""
    if not hi_s > lo_s:
        raise LogError(f"window [{lo_s}, {hi_s}) is empty")
    s = np.clip(starts, lo_s, hi_s)
    e = np.clip(ends, lo_s, hi_s)
    keep = e > s
    t = np.concatenate([[lo_s], s[keep], e[keep], [hi_s]])
    step = np.concatenate(
        [[0], np.ones(int(keep.sum()), dtype=np.int64), -np.ones(int(keep.sum()), dtype=np.int64), [0]]
    )
    order = np.lexsort((step, t))  # at equal times, ends (-1) before starts (+1)
    t, step = t[order], step[order]
    count = np.cumsum(step)[:-1]
    dur = np.diff(t)
    total = hi_s - lo_s
    by_count = pd.Series(dur).groupby(count).sum().sort_index()
    cum = by_count.cumsum() / total

    def quantile(q: float) -> float:
        return float(by_count.index[int(np.searchsorted(cum.to_numpy(), q))])

    return {
        "mean": float((count * dur).sum() / total),
        "median": quantile(0.5),
        "p90": quantile(0.9),
        "max": float(count[dur > 0].max()) if (dur > 0).any() else 0.0,
        "fraction_at_limit": float(dur[count >= limit].sum() / total),
    }


def run_inflight(
    df: pd.DataFrame, from_s: float, to_s: float, min_bytes: int, tail_s: float, limit: int
) -> dict[str, Any]:
    """The module's figures for one run's requests (see the module doc)."""
    w = window(df, from_s, to_s)
    ok = w[w["outcome"] == "ok"]
    if ok.empty:
        raise LogError(f"no completed request scheduled in [{from_s}, {to_s})")
    # Every completed response in transfer during the window counts, whenever it was scheduled.
    every_ok = df[df["outcome"] == "ok"]
    long = every_ok[every_ok["size_bytes"] > min_bytes]
    counts = time_weighted(
        long["first_byte_s"].to_numpy(float), long["done_s"].to_numpy(float) - tail_s, from_s, to_s, limit
    )
    rates = {}
    for lo, hi in RATE_CLASSES:
        c = ok[(ok["size_bytes"] > lo) & ((ok["size_bytes"] <= hi) if hi else True)]
        dur = c["done_s"] - c["first_byte_s"]
        c, dur = c[dur > 0], dur[dur > 0]
        kbit = c["size_bytes"] * 8 / dur / 1e3
        name = f"{lo}-{hi}" if hi else f">{lo}"
        rates[name] = {
            "count": len(c),
            "median": float(kbit.median()) if len(c) else None,
            "p25": float(kbit.quantile(0.25)) if len(c) else None,
            "p75": float(kbit.quantile(0.75)) if len(c) else None,
            "mean_transfer_s": float(dur.mean()) if len(c) else None,
        }
    return {
        "window_s": [from_s, to_s],
        "min_bytes": min_bytes,
        "tail_s": tail_s,
        "limit": limit,
        "long_responses": int(((long["first_byte_s"] < to_s) & (long["done_s"] - tail_s > from_s)).sum()),
        "in_transfer": counts,
        "short_bytes_share": float(
            ok.loc[ok["size_bytes"] <= min_bytes, "size_bytes"].sum() / ok["size_bytes"].sum()
        ),
        "per_flow_kbit_s": rates,
    }


def _window(run_dir: Path) -> tuple[float, float]:
    exp = run_dir.parent.parent / "experiment.toml"
    try:
        run = tomllib.loads(exp.read_text())["run"]
        return float(run.get("warmup_s", 0.0)), float(run["duration_s"])
    except (OSError, KeyError, tomllib.TOMLDecodeError, TypeError, ValueError) as e:
        raise LogError(
            f"{exp}: no run.warmup_s/run.duration_s to take the window from ({e}); give --from-s/--to-s"
        ) from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab inflight", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (each with requests.csv)")
    ap.add_argument(
        "--min-bytes", type=int, default=DEFAULT_MIN_BYTES, help="count responses larger than this"
    )
    ap.add_argument(
        "--tail-s", type=float, default=0.0, help="seconds before the last byte when the slot frees (an RTT)"
    )
    ap.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="writers allowed at once")
    ap.add_argument("--from-s", type=float, help="window start (default: the experiment's warmup_s)")
    ap.add_argument("--to-s", type=float, help="window end (default: the experiment's duration_s)")
    a = ap.parse_args(argv)
    if a.min_bytes < 0 or a.tail_s < 0 or a.limit < 1:
        ap.error("--min-bytes and --tail-s must be >= 0, --limit >= 1")
    if (a.from_s is None) != (a.to_s is None):
        ap.error("--from-s and --to-s go together (neither: the experiment's window)")
    out = {}
    for r in a.runs:
        lo, hi = (a.from_s, a.to_s) if a.from_s is not None else _window(r)
        out[r.name] = run_inflight(read_requests(r / "requests.csv"), lo, hi, a.min_bytes, a.tail_s, a.limit)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0
