"""Synthetic per-request logs with known answers, and a synthetic experiment directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shortfirst_lab.analysis import REQUEST_COLUMNS, fit_baseline

#: The release build the namespace tests run (`make test` builds it first).
RELEASE_BIN = Path(__file__).resolve().parents[2] / "target" / "release" / "shortfirst"
#: Marks of a test that builds namespaces, qdiscs or TUN devices: skipped, with the reason,
#: unless run as root (CI runs as root).
NEEDS_ROOT = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="needs root: network namespaces, qdiscs and TUN devices (CI runs as root)"
    ),
]

BASE_A_S = 0.002
BASE_RATE = 9_500_000.0


def requests_frame(
    sizes, response_s, scheduled_s=None, outcome=None, ids=None, lateness_s=0.0
) -> pd.DataFrame:
    """A requests.csv-shaped frame; response_s NaN → outcome failed with no done_s."""
    sizes = np.asarray(sizes, dtype=int)
    n = sizes.size
    rt = np.asarray(response_s, dtype=float)
    sched = np.arange(n, dtype=float) if scheduled_s is None else np.asarray(scheduled_s, dtype=float)
    start = sched + lateness_s
    if outcome is None:
        outcome = np.where(np.isnan(rt), "failed", "ok")
    done = np.where(np.asarray(outcome) == "ok", start + np.nan_to_num(rt), np.nan)
    return pd.DataFrame(
        {
            "id": np.arange(n) if ids is None else ids,
            "client": 0,
            "path": [f"/f{s}.bin" for s in sizes],
            "size_bytes": sizes,
            "bytes_received": np.where(np.asarray(outcome) == "ok", sizes, 0),
            "status": np.where(np.asarray(outcome) == "ok", 200, 0),
            "outcome": outcome,
            "attempts": 1,
            "scheduled_s": sched,
            "start_s": start,
            "connected_s": start + 0.0001,
            "first_byte_s": start + 0.0002,
            "done_s": done,
        },
        columns=list(REQUEST_COLUMNS),
    )


def write_run_dir(
    rdir: Path,
    requests: pd.DataFrame,
    health: pd.DataFrame | None = None,
    record: dict | None = None,
    generator: dict | None = None,
) -> Path:
    """A run directory as the runner leaves it: requests.csv, health.csv (if given), run.json
    (status ok unless `record` says otherwise) and the generator's summary.json."""
    rdir.mkdir(parents=True, exist_ok=True)
    requests.to_csv(rdir / "requests.csv", index=False)
    if health is not None:
        health.to_csv(rdir / "health.csv", index=False)
    (rdir / "run.json").write_text(json.dumps({"status": "ok", **(record or {})}))
    (rdir / "summary.json").write_text(
        json.dumps({"lateness_p99_ms": 0.4, "valid": True, **(generator or {})})
    )
    return rdir


EXPERIMENT_TOML = """\
[experiment]
name = "synthetic"
description = "synthetic logs for tests"
policies = ["fair", "srpt"]
loads = [0.7, 0.9]
repeats = 1
seed = 3

[workload]
kind = "wc98like"
files = 100
requests = 4000

[run]
duration_s = 100
warmup_s = 10
"""


def _heavy_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.minimum((41 * (1 + rng.pareto(1.2, n)) * 10).astype(int), 2_000_000)


@pytest.fixture
def experiment_dir(tmp_path: Path) -> Path:
    """An experiment directory as the runner leaves it, with synthetic logs.

    SRPT's response is the baseline × 2 for every request but the largest ones (× 30 under
    FAIR), so every ratio has a known direction.
    """
    out = tmp_path / "exp"
    (out / "calibration").mkdir(parents=True)
    (out / "experiment.toml").write_text(EXPERIMENT_TOML)
    (out / "provenance.json").write_text(json.dumps({"git_commit": "abc", "kernel": "test", "cpu_count": 2}))
    ladder = np.repeat([41, 1000, 10_000, 100_000, 1_000_000], 3)
    base_rt = BASE_A_S + 8 * ladder / BASE_RATE
    requests_frame(ladder, base_rt, scheduled_s=np.arange(ladder.size) * 2.0).to_csv(
        out / "calibration" / "requests.csv", index=False
    )
    rng = np.random.default_rng(7)
    n = 2000
    sizes = _heavy_sizes(rng, n)
    sched = np.sort(rng.uniform(0, 100, n))
    # The idle time the analysis will derive from that calibration (ladder interpolation).
    base = fit_baseline(ladder, base_rt).predict(sizes)
    for load in (0.7, 0.9):
        for policy, factor in (("fair", 30.0), ("srpt", 2.0)):
            rdir = out / "runs" / f"{policy}-load{load:.2f}-rep1"
            rt = base * factor * (1 + load)
            t = np.arange(0, 101, 1.0)
            health = pd.DataFrame(
                {
                    "t_s": t,
                    "open_connections": (5 if policy == "srpt" else 40) + (t % 7),
                    "listen_overflows": 0,
                    "listen_drops": 0,
                    "server_cpu_s": t * 0.02,
                }
            )
            record = {"policy": policy, "load": load, "repeat": 1, "seed": 3}
            write_run_dir(rdir, requests_frame(sizes, rt, scheduled_s=sched), health, record)
    return out
