"""Which size cutoffs the kernel's bands should default to, in simulation.

    python -m shortfirst_lab theory cutoffs --out results/cutoffs-sim

Each candidate (`CANDIDATES`, plus `serve`'s default as the binary has it) runs through
`shortfirst sim` as the server's kernel bands do (`srpt-classes:CUTOFFS`: processor sharing
within a band, strict priority between bands), beside processor sharing (FAIR) and exact SRPT,
on the same arrivals, on two workloads at 10 Mbit/s:

    wc98       the World-Cup-98-like trace of the TOCS experiments (`--workload wc98like`),
               loads 0.5-0.95: mean response time and the mean of the largest 1% of requests;
    page       a web page's resources (the sizes of the Rust-book chapter the browser
               experiment loads, all requested at once) every 10 s on average among open-model
               downloads of 100 KB-10 MB (bounded Pareto 1.1, the browser experiment's
               background) at loads 0.5-0.95: the page's completion (its last resource's
               response time; median over pages), and the downloads' mean and largest 1%.

Seeds 1-3 each; the first 10% of the wc98 jobs and the first 200 s of the page workload are
warm-up. Writes `summary.json` (every cell, and the means over seeds) and prints the means.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..kit import write_atomic
from ..spec import vocabulary
from .mg1 import BoundedPareto
from .simfigs import run_sim

RATE = "10mbit"
RATE_BYTES_PER_S = 1.25e6
SEEDS = (1, 2, 3)
#: Policies compared: the simulator's spelling of what the server does with each cutoff list
#: (in bytes, so that `candidates` finds the default among them by its spelling).
CANDIDATES = {
    "fair": "ps",
    "paper 1K-50K": "srpt-classes:1000,2000,5000,20000,50000",
    "paper + 1M": "srpt-classes:1000,2000,5000,20000,50000,1000000",
    "by 5, 1K-625K": "srpt-classes:1000,5000,25000,125000,625000",
    "by 4, 1K-1M": "srpt-classes:1000,4000,16000,64000,256000,1000000",
    "exact srpt": "srpt",
}
WC98_LOADS = (0.5, 0.7, 0.8, 0.9, 0.95)
WC98_JOBS = 200_000
PAGE_LOADS = (0.5, 0.8, 0.95)
#: The resources of the browser experiment's Rust-book page (`testbed.pages`, the chapter's
#: HTML, stylesheets, scripts, images and the fonts its stylesheets name), bytes.
PAGE_SIZES_BYTES = (
    *(97, 122, 419, 689, 907, 1196, 1209, 1694, 1835, 2653, 3818, 5284, 5679, 6942, 7411, 7504),
    *(9913, 10097, 10422, 10754, 17320, 17520, 18051, 20094, 30019, 40656, 40800, 40812, 41076),
    *(41353, 42120, 43236, 44352, 44536, 44936, 44988, 56185, 59140, 137537),
)
PAGE_EVERY_S = 10.0
PAGE_DURATION_S = 4_000.0
PAGE_WARMUP_S = 200.0
DOWNLOAD_ALPHA, DOWNLOAD_MIN_BYTES, DOWNLOAD_MAX_BYTES = 1.1, 100e3, 10e6


def candidates() -> dict[str, str]:
    """`CANDIDATES` with `serve`'s default cutoffs (from the binary) among them, once."""
    default = "srpt-classes:" + ",".join(str(c) for c in vocabulary.default_cutoffs_bytes())
    out = {k: v for k, v in CANDIDATES.items() if v != default}
    out["serve default"] = default
    return out


def _largest_1pct_mean(response_s: pd.Series, size_bytes: pd.Series) -> float:
    return float(response_s[size_bytes >= size_bytes.quantile(0.99)].mean())


def wc98_cell(load: float, seed: int, policy: str, scratch: Path, jobs: int = WC98_JOBS) -> dict:
    """One policy on the wc98like workload at `load`: mean and largest-1% response, ms."""
    run_sim(scratch, policy=policy, rate=RATE, workload="wc98like", jobs=jobs, seed=seed, load=load)
    d = pd.read_csv(scratch / "requests.csv").iloc[jobs // 10 :]
    r = d.done_s - d.scheduled_s
    return {"mean_ms": 1e3 * float(r.mean()), "largest_1pct_ms": 1e3 * _largest_1pct_mean(r, d.size_bytes)}


def page_trace(load: float, seed: int, path: Path, duration_s: float = PAGE_DURATION_S) -> None:
    """The page workload's trace (`time_s,path,size_bytes`): downloads at `load` of the link,
    and every page's resources at one instant, pages `PAGE_EVERY_S` apart on average."""
    rng = np.random.default_rng(seed)
    dist = BoundedPareto(DOWNLOAD_ALPHA, DOWNLOAD_MIN_BYTES, DOWNLOAD_MAX_BYTES)
    n = int(2 * duration_s * load * RATE_BYTES_PER_S / dist.mean) + 100
    times = np.cumsum(rng.exponential(dist.mean / (load * RATE_BYTES_PER_S), n))
    times = times[times < duration_s]
    sizes = dist.sample(len(times), rng)
    rows = [(t, "/download", int(s)) for t, s in zip(times, sizes, strict=True)]
    t, page = 0.0, 0
    while (t := t + rng.exponential(PAGE_EVERY_S)) < duration_s:
        rows += [(t, f"/page{page}/{i}", s) for i, s in enumerate(PAGE_SIZES_BYTES)]
        page += 1
    rows.sort()
    frame = pd.DataFrame(rows, columns=["time_s", "path", "size_bytes"])
    frame.to_csv(path, index=False, float_format="%.6f")


def page_cell(trace: Path, policy: str, scratch: Path) -> dict:
    """One policy on a page trace: the pages' median completion (ms), the downloads' mean and
    largest 1% (s)."""
    run_sim(scratch, policy=policy, rate=RATE, trace=trace)
    d = pd.read_csv(scratch / "requests.csv")
    d = d[d.scheduled_s >= PAGE_WARMUP_S]
    r = d.done_s - d.scheduled_s
    is_page = d.path.str.startswith("/page")
    page_done_s = r[is_page].groupby(d.path[is_page].str.split("/").str[1]).max()
    dl = ~is_page
    return {
        "page_median_ms": 1e3 * float(page_done_s.median()),
        "download_mean_s": float(r[dl].mean()),
        "download_largest_1pct_s": _largest_1pct_mean(r[dl], d.size_bytes[dl]),
    }


def _cell(workload: str, load: float, seed: int, candidate: str, metrics: dict) -> dict:
    return {"workload": workload, "load": load, "seed": seed, "candidate": candidate, "metrics": metrics}


def _means(cells: list[dict]) -> dict:
    out: dict = {}
    for c in cells:
        for k, v in c["metrics"].items():
            out.setdefault((c["workload"], c["load"], c["candidate"]), {}).setdefault(k, []).append(v)
    return {f"{w}/{x}/{c}": {k: float(np.mean(v)) for k, v in m.items()} for (w, x, c), m in out.items()}


def sweep(out: str | Path, *, wc98_jobs: int = WC98_JOBS, page_duration_s: float = PAGE_DURATION_S) -> dict:
    """Runs every cell; writes `out/summary.json`; returns it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cands = candidates()
    cells = []
    with tempfile.TemporaryDirectory(prefix="sf-cutoffs-") as tmp:
        scratch, trace = Path(tmp) / "sim", Path(tmp) / "page.csv"
        for load in WC98_LOADS:
            for seed in SEEDS:
                for name, policy in cands.items():
                    m = wc98_cell(load, seed, policy, scratch, wc98_jobs)
                    cells.append(_cell("wc98", load, seed, name, m))
        for load in PAGE_LOADS:
            for seed in SEEDS:
                page_trace(load, seed, trace, page_duration_s)
                for name, policy in cands.items():
                    cells.append(_cell("page", load, seed, name, page_cell(trace, policy, scratch)))
    result = {"rate": RATE, "candidates": cands, "cells": cells, "means": _means(cells)}
    write_atomic(out / "summary.json", json.dumps(result, indent=1) + "\n")
    return result
