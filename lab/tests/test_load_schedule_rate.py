"""`shortfirst load --load-schedule` end to end on loopback: the rate at which requests are
actually *sent* (their start times) follows the schedule within 5% in every phase, and the
generator's summary reports the same phases. The scheduled times themselves are checked
against a hand-computed warp in crates/load (schedule/tests.rs, tests/e2e.rs); this checks
that the sends keep up with them.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from sim_fixtures import loopback_server, require_binary

from shortfirst_lab import commands

BASE_RATE = 120  # requests/s at multiplier 1
# A period of 4.5 s: 180, 450 and 90 requests. Phases long enough that a few milliseconds of
# send lateness on a busy machine (the sends due at a phase's end, spilling into the next)
# stay far inside 5% of the smallest phase.
SCHEDULE = "1500ms@1,1500ms@2.5,1500ms@0.5"
PHASES = [(1.5, 1.0), (1.5, 2.5), (1.5, 0.5)]
PERIOD_S = 4.5
PERIODS = 2


@pytest.mark.slow
def test_sent_rate_follows_the_schedule_per_phase(tmp_path):
    binary = require_binary()
    root = tmp_path / "root"
    root.mkdir()
    (root / "x.bin").write_bytes(b"x" * 300)
    n = 3000  # more than the run needs (1,440): the duration cuts it
    trace = tmp_path / "t.csv"
    trace.write_text(
        "time_s,path,size_bytes\n" + "".join(f"{i / BASE_RATE:.4f},/x.bin,300\n" for i in range(n))
    )
    with loopback_server(binary, root, tmp_path / "serve.log") as url:
        argv = commands.load(binary, url, trace=trace, out=tmp_path / "run", quiet=True)
        argv += [
            "--request-rate",
            str(BASE_RATE),
            "--load-schedule",
            SCHEDULE,
            "--duration",
            f"{PERIOD_S * PERIODS}s",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    log = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert (log["outcome"] == "ok").all()
    start = log["start_s"].to_numpy()
    late_ms = (log["start_s"] - log["scheduled_s"]).max() * 1e3
    t = 0.0
    for _ in range(PERIODS):
        for k, (dur, mult) in enumerate(PHASES):
            want = BASE_RATE * mult * dur
            sent = int(((start >= t) & (start < t + dur)).sum())
            assert abs(sent - want) <= 0.05 * want, (
                f"phase {k} at {t:g} s: sent {sent}, scheduled {want:g} (max lateness {late_ms:.1f} ms)"
            )
            in_phase = log[(log["scheduled_s"] >= t) & (log["scheduled_s"] < t + dur)]
            assert (in_phase["phase"] == k).all() and (in_phase["load_multiplier"] == mult).all()
            t += dur
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    per_phase = [p["requests"] for p in summary["load_schedule"]["phases"]]
    np.testing.assert_allclose(per_phase, [PERIODS * BASE_RATE * m * d for d, m in PHASES], atol=PERIODS)
