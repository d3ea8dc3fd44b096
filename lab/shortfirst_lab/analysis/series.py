"""Per-second client-side series of a run, from its raw `requests.csv` alone.

    python -m shortfirst_lab series RUN_DIR [--out PATH]

writes `RUN_DIR/series.csv` (atomically): one row per second of the run, from second 0 to
the last second in which anything happened, empty seconds included, with the columns

- `second`: the interval [second, second + 1) in seconds since the run's start;
- `scheduled`: requests due in it (`scheduled_s`), sent or not — the offered rate, which
  follows a `--load-schedule`;
- `started`: requests the client started in it (`start_s`; requests never sent, refused at
  the generator's in-flight limit, are not started);
- `completed`: requests that ended in it (`done_s`) with outcome `ok`;
- `incomplete`: requests that ended in it without outcome `ok` (HTTP error, failure, user
  abort, timeout); one never sent counts in the second it was refused;
- `in_flight`: requests started and not yet ended at the second's end;
- `mean_response_s`, `mean_ttfb_s`: mean response time (`done_s − start_s`, as in
  `analysis`) and time to first byte (`first_byte_s − start_s`) of the requests completed in
  it; empty when none completed.

So `completed` sums to the run's `ok` requests and `completed + incomplete` to its rows: the
per-second series of the overload paper's Figs. 7 and 8 (response time and time to first
byte over time, averaged over 1 s intervals), from the client's side.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from ..kit import write_atomic
from .metrics import LogError, read_requests

#: The columns of `series.csv`, in order.
SERIES_COLUMNS = (
    "second",
    "scheduled",
    "started",
    "completed",
    "incomplete",
    "in_flight",
    "mean_response_s",
    "mean_ttfb_s",
)

#: Longest series computed (seconds, ~116 days): a time beyond it in a log is a fault of the
#: log (a unit slip, an absolute timestamp), and the series would not fit in memory anyway.
MAX_SECONDS = 10_000_000


def _seconds(t: np.ndarray) -> np.ndarray:
    """The second each (finite, non-negative) time falls in."""
    return np.floor(np.maximum(t, 0.0)).astype(np.int64)


def per_second(df: pd.DataFrame, source: str = "requests.csv") -> pd.DataFrame:
    """The per-second series (module doc) of a frame as `analysis.read_requests` returns it.

    Raises LogError (naming `source`) when a time is beyond MAX_SECONDS."""
    sched = df["scheduled_s"].to_numpy(dtype=float)
    start = df["start_s"].to_numpy(dtype=float)
    done = df["done_s"].to_numpy(dtype=float)
    first = df["first_byte_s"].to_numpy(dtype=float)
    sent = df["attempts"].to_numpy(dtype=float) > 0
    ok = df["outcome"].eq("ok").to_numpy() & ~np.isnan(done) & ~np.isnan(start)
    # A request ends at done_s; one never sent (no done_s) at its refusal, start_s.
    end = np.where(np.isnan(done), start, done)

    known = np.concatenate([sched, start, end])
    known = known[np.isfinite(known)]
    last = float(known.max()) if known.size else 0.0
    if last >= MAX_SECONDS:
        raise LogError(f"{source}: a time of {last:.0f} s is beyond the series' limit of {MAX_SECONDS} s")
    n = int(np.floor(max(last, 0.0))) + 1 if known.size else 0

    def count(t: np.ndarray, mask: np.ndarray) -> np.ndarray:
        sel = mask & np.isfinite(t)
        return np.bincount(_seconds(t[sel]), minlength=n)[:n]

    everything = np.ones(len(df), dtype=bool)
    completed = count(done, ok)
    with np.errstate(invalid="ignore", divide="ignore"):
        okd = _seconds(done[ok])
        rt_sum = np.bincount(okd, weights=(done - start)[ok], minlength=n)[:n]
        mean_rt = np.where(completed > 0, rt_sum / completed, np.nan)
        has_fb = ok & ~np.isnan(first)
        fb_n = count(done, has_fb)
        fb_sum = np.bincount(_seconds(done[has_fb]), weights=(first - start)[has_fb], minlength=n)[:n]
        mean_fb = np.where(fb_n > 0, fb_sum / fb_n, np.nan)
    started = count(start, sent)
    ended_sent = count(end, sent)
    return pd.DataFrame(
        {
            "second": np.arange(n, dtype=np.int64),
            "scheduled": count(sched, everything),
            "started": started,
            "completed": completed,
            "incomplete": count(end, ~ok),
            "in_flight": np.cumsum(started) - np.cumsum(ended_sent),
            "mean_response_s": mean_rt,
            "mean_ttfb_s": mean_fb,
        },
        columns=list(SERIES_COLUMNS),
    )


def series_of_run(run_dir: str | Path) -> pd.DataFrame:
    """The per-second series of `RUN_DIR/requests.csv`."""
    path = Path(run_dir) / "requests.csv"
    return per_second(read_requests(path), str(path))


def write_series(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Writes the series of a run to `out` (default `RUN_DIR/series.csv`) atomically."""
    out = Path(out) if out is not None else Path(run_dir) / "series.csv"
    df = series_of_run(run_dir)
    write_atomic(out, df.to_csv(index=False, na_rep="", float_format="%.6f", lineterminator="\n"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab series",
        description="Per-second client-side series of a run (started, completed, mean response "
        "time and time to first byte of the requests completed each second) from its requests.csv.",
    )
    ap.add_argument("run_dir", metavar="RUN_DIR", help="a directory with a requests.csv")
    ap.add_argument("--out", help="where to write the series (default: RUN_DIR/series.csv)")
    args = ap.parse_args(argv)
    print(write_series(args.run_dir, args.out))
    return 0
