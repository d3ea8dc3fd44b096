"""Synthetic per-request logs with known answers, and a synthetic experiment directory."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shortfirst_lab.analysis.metrics import REQUEST_COLUMNS, fit_baseline
from shortfirst_lab.kit import shortfirst_binary

REPO = Path(__file__).resolve().parents[2]
#: The binary the lab's tests run: ``$SHORTFIRST_BIN``, else the release build (`make test`
#: builds the one it sets first).
BIN = shortfirst_binary()


def load_script(relpath: str, name: str):
    """A script of the repository that is not a package module (``bench/serve.py``,
    ``scripts/check_history.py``) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO / relpath)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


SRRT_EXPERIMENT_TOML = """\
[experiment]
name = "synthetic-srrt"
description = "synthetic logs of FAIR, SRPT and SRRT with two client groups"
policies = ["fair", "srpt", "srrt"]
loads = [0.6, 0.9]
seed = 3

[uplink]
rate = "10mbit"

[workload]
kind = "surge"
files = 100
requests = 400

[client]
clients = 4

[[client.groups]]
name = "near"
clients = 2
rtt_ms = 50
loss = 0.005

[[client.groups]]
name = "far"
clients = 2
rtt_ms = 350
loss = 0.03

[run]
duration_s = 100
warmup_s = 10
"""

#: srrt's metrics as the server renders them (estimate ratio counts per bucket, not cumulative:
#: 1, 0, 1, 2, 10, 4, 1, 0, 0 and 1 above 8: 20 responses).
SRRT_METRICS_TEXT = """\
# HELP shortfirst_requests_total Responses completed, by the band they started in.
# TYPE shortfirst_requests_total counter
shortfirst_requests_total{band="1"} 20
# HELP shortfirst_rrt_cutoff_seconds Response-time cutoffs in force.
# TYPE shortfirst_rrt_cutoff_seconds gauge
shortfirst_rrt_cutoff_seconds{band="1"} 0.05
# TYPE shortfirst_srrt_band_changes_total counter
shortfirst_srrt_band_changes_total{cause="start"} 7
shortfirst_srrt_band_changes_total{cause="drain"} 3
shortfirst_srrt_band_changes_total{cause="tcp_state"} 1
# TYPE shortfirst_srrt_demotions_held_total counter
shortfirst_srrt_demotions_held_total 2
# TYPE shortfirst_srrt_tcp_info_reads_total counter
shortfirst_srrt_tcp_info_reads_total 30
# TYPE shortfirst_srrt_tcp_info_errors_total counter
shortfirst_srrt_tcp_info_errors_total 0
# TYPE shortfirst_srrt_estimate_ratio histogram
shortfirst_srrt_estimate_ratio_bucket{le="0.125"} 1
shortfirst_srrt_estimate_ratio_bucket{le="0.25"} 1
shortfirst_srrt_estimate_ratio_bucket{le="0.5"} 2
shortfirst_srrt_estimate_ratio_bucket{le="0.8"} 4
shortfirst_srrt_estimate_ratio_bucket{le="1"} 14
shortfirst_srrt_estimate_ratio_bucket{le="1.25"} 18
shortfirst_srrt_estimate_ratio_bucket{le="2"} 19
shortfirst_srrt_estimate_ratio_bucket{le="4"} 19
shortfirst_srrt_estimate_ratio_bucket{le="8"} 19
shortfirst_srrt_estimate_ratio_bucket{le="+Inf"} 20
shortfirst_srrt_estimate_ratio_count 20
# TYPE shortfirst_srrt_estimated_seconds_sum counter
shortfirst_srrt_estimated_seconds_sum 9
# TYPE shortfirst_srrt_measured_seconds_sum counter
shortfirst_srrt_measured_seconds_sum 10
"""

#: Response time ÷ the size's idle time, per policy and group; the largest file under srrt
#: takes SRRT_LARGEST_FACTOR instead (so its stretch against FAIR is 2, against SRPT 4 or 8/3).
SRRT_FACTORS = {"fair": {"near": 4.0, "far": 4.0}, "srpt": {"near": 2.0, "far": 3.0},
                "srrt": {"near": 1.6, "far": 2.5}}  # fmt: skip
SRRT_LARGEST_FACTOR = 8.0
SRRT_GROUP_CLIENTS = {"near": [0, 1], "far": [2, 3]}


def srrt_requests(policy: str, load: float) -> pd.DataFrame:
    """One run's requests: 400 over 100 s, client = id % 4, sizes 100 B to 1 MB (the largest
    one request in 10, from both groups), response = factor × (0.01 + size / 10 Mbit/s) × (1 + load)."""
    n = 400
    ids = np.arange(n)
    sizes = np.where(ids % 10 == 7, 1_000_000, 100 * (1 + ids % 13) ** 3)
    clients = ids % 4
    near = np.isin(clients, SRRT_GROUP_CLIENTS["near"])
    factor = np.where(near, SRRT_FACTORS[policy]["near"], SRRT_FACTORS[policy]["far"])
    if policy == "srrt":
        factor = np.where(sizes == 1_000_000, SRRT_LARGEST_FACTOR, factor)
    rt = factor * (0.01 + 8 * sizes / 10e6) * (1 + load)
    df = requests_frame(sizes, rt, scheduled_s=ids * 0.25)
    df["client"] = clients
    return df


@pytest.fixture
def srrt_experiment_dir(tmp_path: Path) -> Path:
    """An experiment directory of FAIR, SRPT and SRRT on two client groups, with groups.json
    and, for srrt, the server's metrics (no calibration: slowdown is not computed)."""
    out = tmp_path / "srrt-exp"
    out.mkdir()
    (out / "experiment.toml").write_text(SRRT_EXPERIMENT_TOML)
    for load in (0.6, 0.9):
        for policy in ("fair", "srpt", "srrt"):
            record = {"policy": policy, "load": load, "repeat": 1, "seed": 3}
            rdir = out / "runs" / f"{policy}-load{load:.2f}-rep1"
            write_run_dir(rdir, srrt_requests(policy, load), record=record)
            groups = [
                {"name": "near", "rtt_ms": 50.0, "jitter_ms": 0.0, "loss": 0.005,
                 "clients": SRRT_GROUP_CLIENTS["near"], "address": "10.78.1.2", "measured": {"rtt_ms": 50.4}},
                {"name": "far", "rtt_ms": 350.0, "jitter_ms": 0.0, "loss": 0.03,
                 "clients": SRRT_GROUP_CLIENTS["far"], "address": "10.78.2.2", "measured": {}},
            ]  # fmt: skip
            (rdir / "groups.json").write_text(json.dumps({"groups": groups, "emulator": {}}))
            if policy == "srrt":
                (rdir / "server_metrics.txt").write_text(SRRT_METRICS_TEXT)
    return out
