"""One experiment, two schedulers, end to end: userspace-smoke.toml cut to FAIR in the kernel's
bands and SRPT ordered by the server itself (`serve --scheduler user`), 6 s each on a real
10 Mbit/s namespace testbed with the real binary. The user arm's uplink is a plain token bucket,
and summary.json compares the arms.

Needs root (namespaces, qdiscs): skipped with a message otherwise. About 30 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import load_experiment

pytestmark = NEEDS_ROOT

SMOKE = Path(__file__).resolve().parents[1] / "experiments" / "userspace-smoke.toml"
OVERRIDES = [
    'experiment.arms=["fair", "srpt/user"]',
    "server.write_concurrency=0",  # no crovella arm
    "run.duration_s=6",
    "calibration.sizes=2",
]
ARM_KEYS = {"policy", "scheduler", "load", "mean_response_ratio", "throughput_ratio", "fraction_starved",
            "max_stretch", "measured_over_ideal"}  # fmt: skip


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, dict]:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    out = tmp_path_factory.mktemp("arms") / "out"
    exp = load_experiment(SMOKE, OVERRIDES)
    return out, runner.Runner(exp, out, BIN, progress=False).run()


def test_both_arms_ran_and_the_summary_compares_them(experiment):
    out, s = experiment
    for run in ("fair-load0.80-rep1", "srpt-user-load0.80-rep1"):
        rec = json.loads((out / "runs" / run / "run.json").read_text())
        assert rec["status"] == "ok", (run, rec["status"])
        assert not rec.get("health_errors"), rec["health_errors"]
    assert [(r["arm"], r["scheduler"]) for r in s["runs"]] == [("fair", "kernel"), ("srpt/user", "user")]
    fair, user = s["arm_comparisons"]
    for a in (fair, user):
        assert ARM_KEYS <= set(a), a
        assert a["load"] == 0.8 and a["measured_over_ideal"] is not None and a["measured_over_ideal"] > 0
    assert (user["policy"], user["scheduler"], user["ideal"]) == ("srpt", "user", "srpt")
    # At load 0.8 the link is not the limit: both arms carry what the trace offers.
    assert 0.7 < user["throughput_ratio"] < 1.3, user
    assert 0 <= user["fraction_starved"] <= 1 and user["max_stretch"] > 0


def test_the_user_arm_runs_under_a_token_bucket_and_paces_itself(experiment):
    out, _ = experiment
    user, fair = out / "runs" / "srpt-user-load0.80-rep1", out / "runs" / "fair-load0.80-rep1"
    assert "--scheduler user --link-rate 10000000" in (user / "commands.txt").read_text()
    assert "--scheduler" not in (fair / "commands.txt").read_text()
    (band,) = json.loads((user / "uplink.json").read_text())["bands"]
    assert band["class"] == "tbf" and band["bytes"] > 0
    # The pacer runs just under the bucket's rate: the FIFO below never overflows.
    assert band["drops"] == 0, band
    assert all(b["class"] != "tbf" for b in json.loads((fair / "uplink.json").read_text())["bands"])
    health = pd.read_csv(user / "health.csv")
    assert "band_bytes.1" in health.columns and health["open_connections"].notna().all()
