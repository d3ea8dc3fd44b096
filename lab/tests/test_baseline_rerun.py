"""`experiment.baseline_rerun`: the first baseline run twice at every point, and its rerun's
stretch against its first run in the summary — validation, the matrix, the runner (fake testbed)
and the summary on synthetic logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import requests_frame, write_run_dir
from test_runner import fake_env  # noqa: F401 - the fixture, shared

from shortfirst_lab.analysis import metrics as analysis
from shortfirst_lab.analysis import report
from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import (
    Arm,
    ExperimentError,
    experiment_from_dict,
    load_experiment,
    run_dir_name,
)


def _doc(**experiment):
    return {
        "experiment": {"name": "t", "loads": [0.5, 0.9]} | experiment,
        "workload": {"kind": "surge", "files": 10, "requests": 10},
        "run": {"duration_s": 10},
    }


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (_doc(arms=["fair", "srpt/user"], baseline_rerun="yes"), "true or false"),
        (_doc(arms=["srpt", "srpt/user"], baseline_rerun=True), "a baseline to rerun"),
        (_doc(policies=["srpt", "srrt"], baseline_rerun=True), "a baseline to rerun"),
        (_doc(policies=["fair", "srpt"], loads=[1.2], baseline_rerun=True), "not in an overload experiment"),
    ],
)
def test_bad_baseline_rerun_fails_naming_the_key(doc, expected):
    with pytest.raises(ExperimentError, match=expected) as e:
        experiment_from_dict(doc)
    assert "experiment.baseline_rerun" in str(e.value)


def test_overload_schedules_refuse_a_rerun():
    doc = _doc(policies=["fair", "srpt"], baseline_rerun=True) | {"client": {"load_schedule": "const@0.5"}}
    with pytest.raises(ExperimentError, match="experiment.baseline_rerun"):
        experiment_from_dict(doc)


@pytest.mark.parametrize(
    ("experiment", "again"),
    [
        ({"arms": ["fair", "srpt/user"]}, Arm("fair")),  # the default baseline: FAIR
        ({"arms": ["srpt", "srpt/user"], "baselines": ["srpt"]}, Arm("srpt")),  # the first given
        ({"arms": ["fair/user", "srpt/user"]}, Arm("fair", "user")),  # the first FAIR arm
        ({"policies": ["fair", "srpt"]}, Arm("fair")),
    ],
)
def test_the_matrix_runs_the_baseline_again_after_each_points_arms(experiment, again):
    exp = experiment_from_dict(_doc(baseline_rerun=True, **experiment))
    specs = exp.matrix()
    arms = len(exp.arm_list())
    assert len(specs) == 2 * (arms + 1)
    for point in (specs[: arms + 1], specs[arms + 1 :]):
        *firsts, rerun = point
        assert not any(s.rerun for s in firsts) and rerun.rerun
        assert rerun.arm == again and rerun.seed == firsts[0].seed and rerun.load == firsts[0].load
        assert rerun.run_id == run_dir_name(
            again.policy, rerun.load, 1, scheduler=again.scheduler, rerun=True
        )
    assert specs[2].run_id.endswith("-rerun-rep1") and "-load0.50-" in specs[2].run_id
    assert len({s.run_id for s in specs}) == len(specs)
    assert exp.to_dict()["experiment"]["baseline_rerun"] is True
    # Without the key: no rerun, and the file's dictionary does not gain it.
    plain = experiment_from_dict(_doc(**experiment))
    assert not any(s.rerun for s in plain.matrix()) and "baseline_rerun" not in plain.to_dict()["experiment"]


def test_the_runner_reruns_the_baseline_without_simulating_it(fake_env, tmp_path):  # noqa: F811 - the fixture
    exp_path, bin_path = fake_env
    exp_path.write_text(
        exp_path.read_text().replace(
            'policies = ["fair", "srpt"]', 'policies = ["fair", "srpt"]\nbaseline_rerun = true'
        )
    )
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()
    rec = json.loads((out / "runs" / "fair-load0.50-rerun-rep1" / "run.json").read_text())
    assert rec["status"] == "ok" and rec["rerun"] is True and "sim" not in rec
    assert [r["run"] for r in summary["runs"]] == ["fair-load0.50-rep1", "srpt-load0.50-rep1"]
    (row,) = summary["baseline_reruns"]
    assert (row["baseline"], row["load"], row["repeat"]) == ("fair", 0.5, 1)
    assert row["matched"] > 0


TOML = """\
[experiment]
name = "rerun"
arms = ["fair", "srpt/user"]
loads = [0.8]
baseline_rerun = true

[workload]
kind = "surge"
files = 100
requests = 400

[run]
duration_s = 100
warmup_s = 10
"""


def test_the_summary_gives_the_baselines_stretch_against_itself(tmp_path: Path):
    # FAIR's first run: 0.1 s for every request; its rerun: the same, but a tenth of the
    # requests (ids ending in 3) took 0.25 s, and one (id 13) 0.5 s. User SRPT: 0.05 s each.
    out = tmp_path / "exp"
    out.mkdir()
    (out / "experiment.toml").write_text(TOML)
    ids = np.arange(400)
    sizes = 100 * (1 + ids % 13)
    rerun_rt = np.where(ids % 10 == 3, 0.25, 0.1)
    rerun_rt[13] = 0.5
    runs = {
        ("fair", False): np.full(400, 0.1),
        ("fair", True): rerun_rt,
        ("srpt/user", False): np.full(400, 0.05),
    }
    for (label, again), rt in runs.items():
        arm = Arm(*label.split("/"))
        rdir = out / "runs" / run_dir_name(arm.policy, 0.8, 1, scheduler=arm.scheduler, rerun=again)
        record = {"policy": arm.policy, "load": 0.8, "repeat": 1, "seed": 1} | (
            {"scheduler": arm.scheduler} if arm.scheduler != "kernel" else {}
        )
        write_run_dir(rdir, requests_frame(sizes, rt, scheduled_s=ids * 0.25), record=record)
    s = report.build(out, with_figures=False)
    window = analysis.window(
        analysis.with_response_times(requests_frame(sizes, rerun_rt, ids * 0.25)), 10, 100
    )
    slower = float((window["id"] % 10 == 3).mean())
    (row,) = s["baseline_reruns"]
    assert (row["baseline"], row["load"], row["repeat"], row["valid"]) == ("fair", 0.8, 1, True)
    assert row["fraction_starved"] == pytest.approx(slower)
    assert row["max_stretch"] == pytest.approx(2.5)  # id 13 is before the window
    delta_s = analysis.stretch_resolution_s(10_000_000, 1500)
    assert row["fraction_starved_resolved"] == pytest.approx(slower)
    assert row["max_stretch_resolved"] == pytest.approx(0.25 / (0.1 + delta_s))
    assert row["mean_response_ratio"] == pytest.approx(0.1 / window["response_s"].mean())
    # The rerun is no arm of its own: runs, comparisons and arm rows are the first runs'.
    assert [r["run"] for r in s["runs"]] == ["fair-load0.80-rep1", "srpt-user-load0.80-rep1"]
    assert [a["arm"] for a in s["arm_comparisons"]] == ["fair", "srpt/user"]
    assert s["arm_comparisons"][1]["max_stretch"] == pytest.approx(0.5)
    assert len(s["comparisons"]) == 1
    report.build(out)
    assert "The baseline against itself" in (out / "report.html").read_text()
