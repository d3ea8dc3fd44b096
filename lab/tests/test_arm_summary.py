"""The summary per arm (`experiment.arms`): each arm against FAIR per load, with measured ÷ ideal,
on synthetic logs of four arms; the runner's summary of a fake experiment with arms; and a
policies experiment's summary without any of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import requests_frame, write_run_dir
from test_runner import FakeTestbed, fake_env  # noqa: F401 - the fixture, shared

from shortfirst_lab.analysis import metrics as analysis
from shortfirst_lab.analysis import report
from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import Arm, load_experiment, run_dir_name

#: What every per-arm comparison carries.
ARM_KEYS = {"policy", "scheduler", "load", "mean_response_ratio", "throughput_ratio", "link_throughput_ratio",
            "fraction_starved", "max_stretch", "measured_over_ideal"}  # fmt: skip


ARMS_TOML = """\
[experiment]
name = "synthetic-arms"
description = "synthetic logs of four arms"
arms = ["fair", "srpt", "srpt/user", "srpt/crovella"]
loads = [0.8, 0.9]
seed = 3

[workload]
kind = "surge"
files = 100
requests = 400

[server]
write_concurrency = 35

[run]
duration_s = 100
warmup_s = 10
"""
#: Response time ÷ (0.01 + the size's serialisation time), per arm, and for the largest size
#: (1 MB, every tenth request): SRPT in the kernel takes it 2x FAIR's time, SRPT in user space
#: exactly FAIR's, Crovella's baseline is 1.25x FAIR's for everything.
FACTORS = {"fair": (4.0, 4.0), "srpt": (2.0, 8.0), "srpt/user": (1.5, 4.0), "srpt/crovella": (5.0, 5.0)}
#: Measured ÷ simulated per arm (the simulator's responses are the measured ones ÷ this); the
#: kernel SRPT runs have no simulation.
IDEAL = {"fair": 1.25, "srpt/user": 2.0, "srpt/crovella": 4.0}


def _requests(arm: str, load: float, divide: float = 1.0) -> pd.DataFrame:
    ids = np.arange(400)
    sizes = np.where(ids % 10 == 7, 1_000_000, 100 * (1 + ids % 13) ** 3)
    small, large = FACTORS[arm]
    rt = np.where(sizes == 1_000_000, large, small) * (0.01 + 8 * sizes / 10e6) * (1 + load) / divide
    return requests_frame(sizes, rt, scheduled_s=ids * 0.25)


@pytest.fixture
def arms_dir(tmp_path: Path) -> Path:
    out = tmp_path / "arms-exp"
    out.mkdir()
    (out / "experiment.toml").write_text(ARMS_TOML)
    for load in (0.8, 0.9):
        for label in FACTORS:
            arm = Arm(*label.split("/")) if "/" in label else Arm(label)
            record = {"policy": arm.policy, "load": load, "repeat": 1, "seed": 3}
            if arm.scheduler != "kernel":
                record["scheduler"] = arm.scheduler
            invalid = label == "srpt/crovella" and load == 0.9
            rdir = out / "runs" / run_dir_name(arm.policy, load, 1, scheduler=arm.scheduler)
            gen = {"lateness_p99_ms": 9.0, "valid": False} if invalid else None
            write_run_dir(rdir, _requests(label, load), record=record, generator=gen)
            if label in IDEAL:
                (rdir / "sim").mkdir()
                _requests(label, load, IDEAL[label]).to_csv(rdir / "sim" / "requests.csv", index=False)
    return out


def _window_mean(arm: str, load: float) -> float:
    return float(
        analysis.window(analysis.with_response_times(_requests(arm, load)), 10, 100)["response_s"].mean()
    )


def test_summary_compares_every_arm_with_fair_per_load(arms_dir: Path):
    s = report.build(arms_dir)
    rows = {(a["arm"], a["load"]): a for a in s["arm_comparisons"]}
    assert list(rows) == [(arm, ld) for arm in FACTORS for ld in (0.8, 0.9)]
    for a in s["arm_comparisons"]:
        assert ARM_KEYS <= set(a), a
        assert a["baseline"] == "fair" and a["repeats"] == 1
    window = analysis.window(analysis.with_response_times(_requests("fair", 0.9)), 10, 100)
    largest = float((window["size_bytes"] == 1_000_000).mean())
    fair, srpt = rows[("fair", 0.9)], rows[("srpt", 0.9)]
    user, crovella = rows[("srpt/user", 0.9)], rows[("srpt/crovella", 0.9)]
    # FAIR against itself; measured ÷ its ideal (processor sharing).
    assert (fair["mean_response_ratio"], fair["fraction_starved"], fair["max_stretch"]) == (1.0, 0.0, 1.0)
    assert (fair["scheduler"], fair["ideal"]) == ("kernel", "ps")
    assert fair["measured_over_ideal"] == pytest.approx(1.25)
    # Kernel SRPT: the largest file takes twice FAIR's time; no simulation, no ideal ratio.
    assert srpt["mean_response_ratio"] == pytest.approx(_window_mean("fair", 0.9) / _window_mean("srpt", 0.9))
    assert (srpt["fraction_starved"], srpt["max_stretch"]) == (pytest.approx(largest), pytest.approx(2.0))
    assert srpt["measured_over_ideal"] is None and srpt["ideal"].startswith("srpt-classes:")
    # User-space SRPT: the largest file exactly as under FAIR (S = 1 is not starvation), exact SRPT.
    assert (user["policy"], user["scheduler"], user["ideal"]) == ("srpt", "user", "srpt")
    assert (user["fraction_starved"], user["max_stretch"]) == (0.0, pytest.approx(1.0))
    assert user["measured_over_ideal"] == pytest.approx(2.0)
    # Crovella: every request 1.25x slower; its run at 0.9 is invalid, and says so.
    assert (crovella["fraction_starved"], crovella["max_stretch"]) == (1.0, pytest.approx(1.25))
    assert crovella["mean_response_ratio"] == pytest.approx(0.8)
    assert crovella["measured_over_ideal"] == pytest.approx(4.0)
    assert crovella["valid"] is False and rows[("srpt/crovella", 0.8)]["valid"] is True
    fair_run = next(r for r in s["runs"] if r["arm"] == "fair" and r["load"] == 0.9)
    crov_run = next(r for r in s["runs"] if r["arm"] == "srpt/crovella" and r["load"] == 0.9)
    assert crovella["throughput_ratio"] == pytest.approx(
        crov_run["throughput_bytes_per_s"] / fair_run["throughput_bytes_per_s"]
    )


def _write_wire_ideal(arms_dir: Path, label: str, load: float, rt: np.ndarray) -> None:
    arm = Arm(*label.split("/")) if "/" in label else Arm(label)
    sdir = arms_dir / "runs" / run_dir_name(arm.policy, load, 1, scheduler=arm.scheduler) / "sim-wire"
    sdir.mkdir()
    ids = np.arange(400)
    sizes = np.where(ids % 10 == 7, 1_000_000, 100 * (1 + ids % 13) ** 3)
    requests_frame(sizes, rt, scheduled_s=ids * 0.25).to_csv(sdir / "requests.csv", index=False)


def test_the_ideals_own_stretch_is_beside_the_measured_one(arms_dir: Path):
    # The wire ideals at 0.8: FAIR's (processor sharing) 1 s for every request; user SRPT's
    # 0.5 s, but 3 s for the largest size, whose ids end in 7; so the ideal SRPT itself is slower
    # than the ideal FAIR for a tenth of the requests, by 3x at worst (3 ÷ (1 + δ) beyond δ).
    # Kernel SRPT has no wire ideal: unknown, not 0.
    ids = np.arange(400)
    _write_wire_ideal(arms_dir, "fair", 0.8, np.ones(400))
    _write_wire_ideal(arms_dir, "srpt/user", 0.8, np.where(ids % 10 == 7, 3.0, 0.5))
    s = report.build(arms_dir, with_figures=False)
    rows = {(a["arm"], a["load"]): a for a in s["arm_comparisons"]}
    user, fair, srpt = rows[("srpt/user", 0.8)], rows[("fair", 0.8)], rows[("srpt", 0.8)]
    delta_s = analysis.stretch_resolution_s(10_000_000, 1500)
    window = analysis.window(analysis.with_response_times(_requests("fair", 0.8)), 10, 100)
    largest = float((window["size_bytes"] == 1_000_000).mean())
    assert user["ideal_fraction_starved"] == pytest.approx(largest)
    assert user["ideal_max_stretch"] == pytest.approx(3.0)
    assert user["ideal_fraction_starved_resolved"] == pytest.approx(largest)
    assert user["ideal_max_stretch_resolved"] == pytest.approx(3.0 / (1.0 + delta_s))
    # The measured stretch is the runs' own, not the ideal's.
    assert user["max_stretch"] == pytest.approx(1.0)
    assert (fair["ideal_fraction_starved"], fair["ideal_max_stretch"]) == (0.0, 1.0)
    assert srpt["ideal_max_stretch"] is None and srpt["ideal_fraction_starved"] is None
    assert rows[("srpt/user", 0.9)]["ideal_max_stretch"] is None  # no sim-wire at 0.9
    (c,) = [c for c in s["comparisons"] if c["arm"] == "srpt/user" and c["load"] == 0.8]
    assert c["ideal_max_stretch"] == pytest.approx(3.0)


def test_link_throughput_is_the_uplinks_own_count_in_the_window(arms_dir: Path):
    # The qdisc's cumulative byte counters, one sample a second; the window is [10, 100] s.
    # FAIR's link sends 1,000 bytes a second there, user-space SRPT's 990; outside the window
    # user-space SRPT sends more, which must not count.
    for label, rate in (("fair", 1000), ("srpt/user", 990)):
        arm = Arm(*label.split("/")) if "/" in label else Arm(label)
        rdir = arms_dir / "runs" / run_dir_name(arm.policy, 0.8, 1, scheduler=arm.scheduler)
        t = np.arange(0, 121)
        sent = np.where(t <= 100, rate * t, rate * 100 + 5000 * (t - 100))
        pd.DataFrame({"t_s": t, "band_bytes.1": sent}).to_csv(rdir / "health.csv", index=False)
    s = report.build(arms_dir, with_figures=False)
    rows = {(a["arm"], a["load"]): a for a in s["arm_comparisons"]}
    assert rows[("srpt/user", 0.8)]["link_throughput_ratio"] == pytest.approx(0.99)
    assert rows[("fair", 0.8)]["link_throughput_ratio"] == 1.0
    # Runs without a health log have no link count: unknown, not 0.
    assert rows[("srpt", 0.8)]["link_throughput_ratio"] is None


def test_comparison_rows_and_runs_carry_the_arm(arms_dir: Path):
    s = report.build(arms_dir, with_figures=False)
    assert [(c["arm"], c["scheduler"], c["baseline"]) for c in s["comparisons"] if c["load"] == 0.8] == [
        ("srpt", "kernel", "fair"), ("srpt/user", "user", "fair"), ("srpt/crovella", "crovella", "fair")
    ]  # fmt: skip
    assert all("measured_over_ideal" in c for c in s["comparisons"])
    assert {(r["arm"], r["scheduler"]) for r in s["runs"]} == {
        ("fair", "kernel"), ("srpt", "kernel"), ("srpt/user", "user"), ("srpt/crovella", "crovella")
    }  # fmt: skip
    # The papers' targets judge SRPT in the kernel's bands when the experiment has it.
    (t,) = [t for t in s["targets"] if t["key"] == "mean_response_ratio"]
    assert t["n"] == 1 and t["arm"] == "srpt"
    assert t["measured"] == pytest.approx(_window_mean("fair", 0.8) / _window_mean("srpt", 0.8))
    analysis_json = json.loads((arms_dir / "runs" / "srpt-user-load0.90-rep1" / "analysis.json").read_text())
    assert analysis_json["scheduler"] == "user" and analysis_json["models"]["analytic_model"] == "srpt"


def test_report_page_shows_the_arms(arms_dir: Path):
    report.build(arms_dir)
    page = (arms_dir / "report.html").read_text()
    assert "Arms: each policy and scheduler against the baseline" in page
    for label in ("srpt/user", "srpt/crovella"):
        assert f"<td>{label}</td>" in page
    # Response time, per-size percentile and bins, CCDF, measured vs models: one line per arm.
    assert len(re.findall(r"<img ", page)) == 5
    table = report.format_table(json.loads((arms_dir / "summary.json").read_text()))
    assert "srpt/crovella" in table and "srpt/user" in table


def test_a_policies_experiment_summary_has_no_arm_keys(experiment_dir: Path):
    s = report.build(experiment_dir, with_figures=False)
    assert "arm_comparisons" not in s and "arms" not in s["experiment"]
    assert all("scheduler" not in c and "arm" not in c for c in s["comparisons"])
    assert all("scheduler" not in r and "arm" not in r for r in s["runs"])


def test_the_runner_summarises_a_fake_experiment_per_arm(fake_env, tmp_path):  # noqa: F811 - the fixture
    exp_path, bin_path = fake_env
    exp_path.write_text(
        exp_path.read_text().replace('policies = ["fair", "srpt"]', 'arms = ["fair", "srpt/user"]')
    )
    summary = runner.Runner(load_experiment(exp_path), tmp_path / "out", bin_path, progress=False).run()
    assert [(r["arm"], r["scheduler"]) for r in summary["runs"]] == [
        ("fair", "kernel"),
        ("srpt/user", "user"),
    ]
    assert [a["arm"] for a in summary["arm_comparisons"]] == ["fair", "srpt/user"]
    for a in summary["arm_comparisons"]:
        assert ARM_KEYS <= set(a)
        assert a["measured_over_ideal"] is None  # the fake binary has no simulator


def test_a_wan_sweep_names_each_arm():
    from shortfirst_lab.analysis import wanreport

    row = {"load": 0.8, "rtt_ms": 100, "loss": 0.01, "mean_response_ratio": 1.1, "throughput_ratio": 1.0,
           "largest_1pct_ratio": 1.0, "valid": True, "path": "rtt100ms-loss1pct"}  # fmt: skip
    arms = [("srpt", "kernel"), ("srpt/user", "user")]
    cmps = [row | {"policy": "srpt", "arm": a, "scheduler": s, "baseline": "fair"} for a, s in arms]
    summary = {"runs": [], "comparisons": cmps}
    (table,) = wanreport.tables(summary)
    assert [r[3] for r in table[3]] == ["srpt", "srpt/user"]


@pytest.mark.parametrize(
    ("arms", "judged"),
    [
        (["srpt", "srpt/user"], "srpt"),  # the papers' mechanism first
        (["srpt/user", "srpt/crovella"], "srpt/user"),  # tocs-lan.toml: SRPT in user space
        (["srpt/crovella"], "srpt"),  # neither: no figure, nothing judged
    ],
)
def test_targets_are_read_on_kernel_srpt_else_user_srpt(arms, judged):
    ratio = {"srpt": 4.0, "srpt/user": 6.0}

    def row(arm: str) -> dict:
        policy, _, scheduler = arm.partition("/")
        return {"policy": policy, "scheduler": scheduler or "kernel", "arm": arm, "baseline": "fair",
                "load": 0.8, "mean_response_ratio": ratio.get(arm, 9.0)}  # fmt: skip

    (t,) = [t for t in report.target_rows([row(a) for a in arms]) if t["key"] == "mean_response_ratio"]
    assert t["arm"] == judged
    assert t["measured"] == (ratio[judged] if judged in arms else None)
