"""Policy against baseline: the pairs, stretch on hand-made logs, per-group rows, the SRRT paper's
tables, and the whole report on a synthetic FAIR/SRPT/SRRT experiment with client groups."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SRRT_FACTORS, SRRT_LARGEST_FACTOR, SRRT_METRICS_TEXT, requests_frame, srrt_requests

from shortfirst_lab.__main__ import main
from shortfirst_lab.analysis import metrics as analysis
from shortfirst_lab.analysis import policycmp, report
from shortfirst_lab.spec.experiment import ExperimentError, experiment_from_dict

#: What every comparison row carries (the issue's keys, then what the existing consumers read).
ISSUE_KEYS = {
    "uplink", "load", "baseline", "policy", "mean_response_ratio", "throughput_ratio",
    "fraction_starved", "max_stretch", "largest_file_stretch",
}  # fmt: skip
FAIR_KEYS = {"repeat", "mean_slowdown_ratio", "largest_1pct_ratio", "largest_file_ratio", "valid"}


def _exp(policies, baselines=None, rate="10mbit"):
    doc = {
        "experiment": {"name": "t", "policies": policies, "loads": [0.5]},
        "uplink": {"rate": rate},
        "workload": {"kind": "surge", "files": 10, "requests": 10},
        "run": {"duration_s": 10},
    }
    if baselines is not None:
        doc["experiment"]["baselines"] = baselines
    return experiment_from_dict(doc)


@pytest.mark.parametrize(
    "policies, baselines, expected",
    [
        (["fair", "srpt"], None, [("srpt", "fair")]),
        (["fair", "srpt", "srrt"], None, [("srpt", "fair"), ("srrt", "fair"), ("srrt", "srpt")]),
        (["srrt", "srpt", "fair"], None, [("srrt", "fair"), ("srrt", "srpt"), ("srpt", "fair")]),
        (["srpt", "srrt"], None, [("srrt", "srpt")]),
        (["fair", "srrt"], None, [("srrt", "fair")]),
        (["fair"], None, []),
        (["srpt", "srpt2"], None, []),
        (
            ["fair", "srpt", "srpt2", "srrt"],
            ["fair", "srpt"],
            [("srpt", "fair"), ("srpt2", "fair"), ("srpt2", "srpt"), ("srrt", "fair"), ("srrt", "srpt")],
        ),
        (["fair", "srpt", "srrt"], ["srpt"], [("fair", "srpt"), ("srrt", "srpt")]),
        (["fair", "srpt", "srrt"], ["fair"], [("srpt", "fair"), ("srrt", "fair")]),
    ],
)
def test_pairs_follow_the_designated_baselines(policies, baselines, expected):
    exp = _exp(policies, baselines)
    assert policycmp.pairs(exp.policies, policycmp.baselines(exp)) == expected


@pytest.mark.parametrize(
    "baselines, expected",
    [(["srrt"], "a list of distinct policies of experiment.policies"), (["fair", "fair"], "distinct"),
     ("fair", "a list of distinct policies")],
)  # fmt: skip
def test_baselines_are_validated(baselines, expected):
    with pytest.raises(ExperimentError, match=re.escape(expected)) as e:
        _exp(["fair", "srpt"], baselines)
    assert "experiment.baselines" in str(e.value)


def test_baselines_written_back_only_when_set():
    assert "baselines" not in _exp(["fair", "srpt"]).to_dict()["experiment"]
    assert _exp(["fair", "srpt"], ["fair"]).to_dict()["experiment"]["baselines"] == ["fair"]


@pytest.mark.parametrize(
    "bits, label", [(10_000_000, "10mbit"), (100_000_000, "100mbit"), (10**9, "1gbit"), (1500, "1500bit")]
)
def test_uplink_label(bits, label):
    assert policycmp.uplink_label(bits) == label


@pytest.mark.parametrize(
    "policy_rt, base_rt, sizes, starved, max_s, largest_s, unmatched",
    [
        # S = 0.5, 1, 3, 2: S > 1 for two of four; the largest size (100) has S 2.
        ([1, 2, 3, 8], [2, 2, 1, 4], [10, 20, 30, 100], 0.5, 3.0, 2.0, 0),
        # Two requests for the largest size: S 2 and 1.5, the largest is 2.
        ([1, 8, 3], [1, 4, 2], [10, 100, 100], 2 / 3, 2.0, 2.0, 0),
        # The largest file failed under the policy: no stretch for it, one unmatched.
        ([1, 1, np.nan], [2, 2, 4], [10, 20, 100], 0.0, 0.5, None, 1),
        # Equal times: S = 1 is not starvation.
        ([2, 2], [2, 2], [10, 100], 0.0, 1.0, 1.0, 0),
    ],
)
def test_stretch_on_hand_made_logs(policy_rt, base_rt, sizes, starved, max_s, largest_s, unmatched):
    p = analysis.with_response_times(requests_frame(sizes, policy_rt))
    b = analysis.with_response_times(requests_frame(sizes, base_rt))
    st = policycmp.stretch(p, b)
    assert st["fraction_starved"] == pytest.approx(starved)
    assert st["max_stretch"] == pytest.approx(max_s)
    assert st["largest_file_stretch"] == (None if largest_s is None else pytest.approx(largest_s))
    assert st["largest_file_size_bytes"] == max(sizes)
    assert st["largest_file_unmatched"] == unmatched


def test_stretch_spread_on_a_hand_made_log():
    p = analysis.with_response_times(requests_frame([10, 20, 30, 100], [1, 2, 3, 8]))
    b = analysis.with_response_times(requests_frame([10, 20, 30, 100], [2, 2, 1, 4]))
    st = policycmp.stretch(p, b)  # S = 0.5, 1, 3, 2
    assert st["median_stretch"] == pytest.approx(1.5)
    assert st["fraction_stretch_over_1_25"] == pytest.approx(0.5)
    assert st["fraction_stretch_over_2"] == pytest.approx(0.25)


@pytest.mark.parametrize("ratio, pct", [(2.0, 50.0), (1.0, 0.0), (0.5, -100.0), (None, None), (0.0, None)])
def test_improvement_pct_from_the_ratio(ratio, pct):
    assert policycmp.improvement_pct(ratio) == (None if pct is None else pytest.approx(pct))


@dataclass
class FakeRun:
    """What compare_runs reads of report.RunData."""

    run: str
    policy: str
    load: float
    requests: pd.DataFrame
    metrics: dict
    repeat: int = 1
    path: str | None = None

    @property
    def key(self):
        return (round(self.load, 2), self.path, self.repeat)


def _run(policy, rt, valid=True, clients=None):
    df = analysis.with_response_times(requests_frame([10, 20, 30, 1000], rt))
    if clients is not None:
        df["client"] = clients
    m = analysis.run_metrics(df, 0.0, 10.0, None)
    m.update(policy=policy, load=0.9, repeat=1, valid=valid)
    return FakeRun(f"{policy}-load0.90-rep1", policy, 0.9, df, m)


def test_compare_runs_rows_keys_and_ratio_convention():
    runs = [_run("fair", [4, 4, 4, 4]), _run("srpt", [1, 1, 2, 8]), _run("srrt", [1, 1, 1, 8], valid=False)]
    rows = policycmp.compare_runs(runs, _exp(["fair", "srpt", "srrt"]), lambda run: None)
    assert [(c["policy"], c["baseline"]) for c in rows] == [
        ("srpt", "fair"),
        ("srrt", "fair"),
        ("srrt", "srpt"),
    ]
    for c in rows:
        assert ISSUE_KEYS | FAIR_KEYS <= set(c)
        assert c["uplink"] == "10mbit"
    srpt_fair, srrt_fair, srrt_srpt = rows
    # baseline mean ÷ policy mean: 4 ÷ 3, 4 ÷ 2.75, 3 ÷ 2.75.
    assert srpt_fair["mean_response_ratio"] == pytest.approx(4 / 3)
    assert srrt_srpt["mean_response_ratio"] == pytest.approx(3 / 2.75)
    assert srrt_srpt["improvement_pct"] == pytest.approx(100 * (1 - 2.75 / 3))
    assert (srpt_fair["fraction_starved"], srpt_fair["max_stretch"]) == (
        pytest.approx(0.25),
        pytest.approx(2.0),
    )
    assert srrt_srpt["fraction_starved"] == 0.0 and srrt_srpt["max_stretch"] == pytest.approx(1.0)
    assert srrt_fair["largest_file_stretch"] == pytest.approx(2.0)
    assert [c["valid"] for c in rows] == [True, False, False]


def test_compare_runs_per_group():
    clients = [0, 0, 1, 1]
    fair = _run("fair", [4, 4, 4, 4], clients=clients)
    srrt = _run("srrt", [1, 2, 2, 8], clients=clients)
    record = {"groups": [{"name": "near", "clients": [0]}, {"name": "far", "clients": [1]}]}
    for r in (fair, srrt):
        r.metrics["groups"] = [
            {"name": "near", "mean_response_s": float(r.requests["response_s"][:2].mean())},
            {"name": "far", "mean_response_s": float(r.requests["response_s"][2:].mean())},
        ]
    (row,) = policycmp.compare_runs([fair, srrt], _exp(["fair", "srrt"]), lambda run: record)
    near, far = row["groups"]
    assert near["name"] == "near" and near["mean_response_ratio"] == pytest.approx(4 / 1.5)
    assert near["improvement_pct"] == pytest.approx(62.5)
    assert (near["fraction_starved"], near["max_stretch"]) == (0.0, pytest.approx(0.5))
    assert far["improvement_pct"] == pytest.approx(-25.0)
    assert (far["fraction_starved"], far["max_stretch"], far["largest_file_stretch"]) == (
        0.5,
        pytest.approx(2.0),
        pytest.approx(2.0),
    )
    assert (far["mean_response_s"], far["baseline_mean_response_s"]) == (
        pytest.approx(5.0),
        pytest.approx(4.0),
    )


def _cmp(policy, baseline, load, pct, valid=True, **kw):
    return {"uplink": "10mbit", "policy": policy, "baseline": baseline, "load": load, "repeat": 1,
            "improvement_pct": pct, "valid": valid, **kw}  # fmt: skip


def test_improvement_table_averages_valid_loads_and_carries_the_paper():
    cmps = [
        _cmp("srrt", "srpt", 0.6, 4.0),
        _cmp("srrt", "srpt", 0.8, 10.0),
        _cmp("srrt", "srpt", 0.95, 50.0, valid=False),
        _cmp("srpt", "fair", 0.6, 20.0),
    ]
    rows = policycmp.improvement_table(cmps, 10_000_000)
    srrt = next(r for r in rows if r["policy"] == "srrt")
    assert srrt["by_load"] == [
        {"load": 0.6, "improvement_pct": 4.0, "valid": True},
        {"load": 0.8, "improvement_pct": 10.0, "valid": True},
        {"load": 0.95, "improvement_pct": 50.0, "valid": False},
    ]
    assert (srrt["average_pct"], srrt["max_pct"], srrt["valid_loads"]) == (7.0, 10.0, 2)
    assert (srrt["paper_average_pct"], srrt["paper_max_pct"]) == (7.5, 13.2)
    assert policycmp.improvement_table(cmps, 1_000_000_000)[0]["paper_average_pct"] is None


def test_paper_targets_at_the_highest_valid_load():
    cmps = [
        _cmp("srrt", "srpt", 0.8, 9.0),
        _cmp("srrt", "srpt", 0.95, 1.0, valid=False),
        _cmp(
            "srrt", "fair", 0.95, 30.0, fraction_starved=0.03, largest_file_stretch=2.0, throughput_ratio=1.0
        ),
    ]
    rows = {t["key"]: t for t in policycmp.paper_targets(cmps, 10_000_000)}
    assert (rows["improvement_pct"]["load"], rows["improvement_pct"]["measured"]) == (0.8, 9.0)
    assert rows["improvement_pct"]["met"] is True
    assert rows["fraction_starved"]["met"] is False
    assert rows["largest_file_stretch"]["met"] is True and rows["throughput_ratio"]["met"] is True
    assert policycmp.paper_targets(cmps, 1_000_000_000) == []
    none = policycmp.paper_targets([], 100_000_000)
    assert len(none) == 4 and all(t["measured"] is None and t["met"] is None for t in none)
    # Nothing valid: the highest load's value, flagged, never judged.
    bad = policycmp.paper_targets([_cmp("srrt", "srpt", 0.6, 3.0, valid=False),
                                   _cmp("srrt", "srpt", 0.9, 8.0, valid=False)], 10_000_000)  # fmt: skip
    assert (bad[0]["load"], bad[0]["measured"], bad[0]["met"], bad[0]["valid"]) == (0.9, 8.0, None, False)


def test_group_table_rows_per_point_and_group():
    runs = [
        {"policy": p, "load": 0.9, "repeat": 1, "valid": p != "srpt",
         "groups": [{"name": "near", "rtt_ms": 50, "loss": 0.005, "mean_response_s": m1},
                    {"name": "far", "rtt_ms": 350, "loss": 0.03, "mean_response_s": m2}]}
        for p, m1, m2 in (("fair", 4.0, 8.0), ("srpt", 2.0, 6.0), ("srrt", 1.0, 6.0))
    ]  # fmt: skip
    groups = [{"name": "near", "improvement_pct": 50.0, "mean_response_ratio": 2.0, "fraction_starved": 0.1,
               "max_stretch": 1.5, "largest_file_stretch": 1.2}]  # fmt: skip
    cmps = [_cmp("srrt", "srpt", 0.9, 0.0, groups=groups)]
    rows = policycmp.group_table(runs, cmps)
    assert [(r["group"], r["mean_response_s"]) for r in rows] == [
        ("near", {"fair": 4.0, "srpt": 2.0, "srrt": 1.0}),
        ("far", {"fair": 8.0, "srpt": 6.0, "srrt": 6.0}),
    ]
    assert rows[0]["pairs"]["srrt_vs_srpt"]["improvement_pct"] == 50.0
    assert rows[1]["pairs"] == {}
    assert not rows[0]["valid"]  # the srpt run at that point is invalid


# --------------------------------------------------------------------------- the whole report


def _by(rows, **kw):
    return [r for r in rows if all(r[k] == v for k, v in kw.items())]


def test_report_on_a_synthetic_srrt_experiment(srrt_experiment_dir: Path):
    s = report.build(srrt_experiment_dir)
    assert {"group_table", "improvement", "paper_targets", "estimate_accuracy"} <= set(s)
    assert len(s["comparisons"]) == 6  # three pairs at two loads
    for c in s["comparisons"]:
        assert ISSUE_KEYS <= set(c) and c["valid"] is True and c["uplink"] == "10mbit"
    (sf,) = _by(s["comparisons"], policy="srrt", baseline="fair", load=0.9)
    (ss,) = _by(s["comparisons"], policy="srrt", baseline="srpt", load=0.9)
    # Every request but the largest file's is faster under srrt than under fair; those take 2x.
    fair = analysis.window(analysis.with_response_times(srrt_requests("fair", 0.9)), 10, 100)
    largest = int((fair["size_bytes"] == fair["size_bytes"].max()).sum())
    assert sf["fraction_starved"] == pytest.approx(largest / len(fair))
    assert sf["largest_file_stretch"] == pytest.approx(SRRT_LARGEST_FACTOR / SRRT_FACTORS["fair"]["far"])
    assert sf["max_stretch"] == pytest.approx(2.0)
    srpt_w = analysis.window(analysis.with_response_times(srrt_requests("srpt", 0.9)), 10, 100)
    srrt_w = analysis.window(analysis.with_response_times(srrt_requests("srrt", 0.9)), 10, 100)
    ratio = srpt_w["response_s"].mean() / srrt_w["response_s"].mean()
    assert ss["mean_response_ratio"] == pytest.approx(ratio)
    assert ss["largest_file_stretch"] == pytest.approx(SRRT_LARGEST_FACTOR / SRRT_FACTORS["srpt"]["near"])
    # Per group: near and far of each point, each pair's improvement from the group's means.
    near = _by(s["group_table"], group="near", load=0.9)[0]
    assert set(near["mean_response_s"]) == {"fair", "srpt", "srrt"}
    exp_pct = 100 * (1 - near["mean_response_s"]["srrt"] / near["mean_response_s"]["srpt"])
    assert near["pairs"]["srrt_vs_srpt"]["improvement_pct"] == pytest.approx(exp_pct)
    assert len(s["group_table"]) == 4
    imp = _by(s["improvement"], policy="srrt", baseline="srpt")[0]
    assert imp["valid_loads"] == 2 and imp["paper_average_pct"] == 7.5
    assert [t["load"] for t in s["paper_targets"]] == [0.9] * 4
    acc = s["estimate_accuracy"]
    assert [a["run"] for a in acc] == ["srrt-load0.60-rep1", "srrt-load0.90-rep1"]
    assert acc[0]["responses"] == 20 and acc[0]["within_factor_1.25"] == pytest.approx(0.7)
    assert "not per group" in s["estimate_accuracy_limits"]
    page = (srrt_experiment_dir / "report.html").read_text()
    assert sf["median_stretch"] == pytest.approx(SRRT_FACTORS["srrt"]["far"] / SRRT_FACTORS["fair"]["far"])
    assert sf["fraction_stretch_over_2"] == 0.0
    for needle in (
        "how far S spreads",
        "Table 2",
        "Fig. 4",
        "estimate predicted",
        "srrt_vs_srpt",
        "Starvation stretch per client group",
    ):
        assert needle in page
    imgs = re.findall(r'<img[^>]*src="([^"]*)"', page)
    # response, percentile, bins, CCDF, measured vs M/G/1, groups per load, improvement per
    # group (no calibration: no slowdown; no health).
    assert len(imgs) == 7


def test_report_targets_move_to_a_lower_load_when_the_top_is_invalid(srrt_experiment_dir: Path):
    (srrt_experiment_dir / "runs" / "srpt-load0.90-rep1" / "summary.json").write_text(
        json.dumps({"lateness_p99_ms": 12.0, "valid": False})
    )
    s = report.build(srrt_experiment_dir, with_figures=False)
    t = {(r["baseline"], r["key"]): r for r in s["paper_targets"]}
    assert t[("srpt", "improvement_pct")]["load"] == 0.6
    assert t[("fair", "fraction_starved")]["load"] == 0.9
    (bad,) = _by(s["comparisons"], policy="srrt", baseline="srpt", load=0.9)
    assert bad["valid"] is False


def test_report_says_why_an_srrt_run_has_no_estimate(srrt_experiment_dir: Path, capsys):
    (srrt_experiment_dir / "runs" / "srrt-load0.60-rep1" / "server_metrics.txt").write_text(
        "# metrics scrape timed out\n"
    )
    bad = SRRT_METRICS_TEXT.replace('le="2"} 19', 'le="2"} 3')
    (srrt_experiment_dir / "runs" / "srrt-load0.90-rep1" / "server_metrics.txt").write_text(bad)
    assert main(["report", str(srrt_experiment_dir)]) == 0
    out = capsys.readouterr().out
    assert "srrt" in out and "srpt" in out
    acc = json.loads((srrt_experiment_dir / "summary.json").read_text())["estimate_accuracy"]
    assert "scrape failed" in acc[0]["error"]
    assert "decrease" in acc[1]["error"] and "server_metrics.txt" in acc[1]["error"]


def test_report_with_no_valid_point_shows_values_flagged(srrt_experiment_dir: Path):
    for rdir in (srrt_experiment_dir / "runs").iterdir():
        (rdir / "summary.json").write_text(json.dumps({"lateness_p99_ms": 9.0, "valid": False}))
    s = report.build(srrt_experiment_dir)
    assert all(c["valid"] is False for c in s["comparisons"])
    assert all(
        t["met"] is None and t["valid"] is False and t["measured"] is not None for t in s["paper_targets"]
    )
    assert all(not b["valid"] for r in s["improvement"] for b in r["by_load"])
    page = (srrt_experiment_dir / "report.html").read_text()
    assert "NO VALID POINT" in page and "(invalid)" in page


def test_wan_sweep_table_names_a_baseline_other_than_fair():
    from shortfirst_lab.analysis import wanreport

    row = {"load": 0.8, "rtt_ms": 100, "loss": 0.01, "mean_response_ratio": 1.1, "throughput_ratio": 1.0,
           "largest_1pct_ratio": 1.0, "valid": True, "path": "rtt100-loss0.01"}  # fmt: skip
    summary = {"runs": [], "comparisons": [row | {"policy": "srrt", "baseline": "fair"},
                                           row | {"policy": "srrt", "baseline": "srpt"}]}  # fmt: skip
    (table,) = wanreport.tables(summary)
    assert sorted(r[3] for r in table[3]) == ["srrt", "srrt vs srpt"]
    assert all(len(r) == len(table[2]) for r in table[3]), "every cell under a header"
