"""The runner on an overload experiment (schedules and setups as matrix dimensions, factor
keys), against the fake testbed and binary of test_runner: each run's command lines carry its
schedule and its setup's flags, the run records name them, and the report is the overload one."""

from __future__ import annotations

import json

from test_runner import FakeTestbed, fake_env  # noqa: F401 - the fixture, shared

from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import load_experiment

OVERLOAD_KEYS = """
load_schedules = ["w1"]

[setups.E]
description = "persistent connections"
client.requests_per_connection = 3

[setups.H]
client.abort_after_s = 2
client.retries = 1
server.max_connections = 50
server.at_max_connections = "wait"
"""


def test_runner_runs_schedules_and_setups(fake_env, tmp_path):  # noqa: F811 - the fixture
    exp_path, bin_path = fake_env
    text = exp_path.read_text().replace("[client]\ntimeout_s = 10\n", "")
    exp_path.write_text(
        text.replace("[calibration]", "[client]\ntimeout_s = 10\n" + OVERLOAD_KEYS + "\n[calibration]")
    )
    exp = load_experiment(exp_path)
    out = tmp_path / "out"
    summary = runner.Runner(exp, out, bin_path, progress=False).run()
    names = sorted(p.name for p in (out / "runs").iterdir())
    assert names == [f"{p}-load0.50-w1-setup{s}-rep1" for p in ("fair", "srpt") for s in "EH"]
    for name in names:
        d = out / "runs" / name
        rec = json.loads((d / "run.json").read_text())
        assert rec["status"] == "ok" and rec["load_schedule"] == "w1" and rec["setup"] == name[-6]
        serve, load = (d / "commands.txt").read_text().splitlines()[1:]
        assert "--load-schedule w1" in load and "--load 0.5" in load
        if name.endswith("setupE-rep1"):
            assert "--persistent 3" in load and "--abort-after" not in load
            assert "--max-connections" not in serve and "--at-max-connections" not in serve
        else:
            assert "--abort-after 2s --retries 1" in load and "--persistent" not in load
            assert "--max-connections 50 --at-max-connections wait" in serve
    assert [(w["name"], w["setup"]) for w in summary["workloads"]] == [("W1", "E"), ("W1", "H")]
    assert json.loads((out / "summary.json").read_text())["workloads"] == summary["workloads"]
    assert (out / "figures" / "setups.png").exists()
    assert len(FakeTestbed.created) == 5, "one testbed per run and one for the calibration"
