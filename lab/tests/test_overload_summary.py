"""The overload summary (`python -m shortfirst_lab overload`) on hand-made run directories with known
answers: the summary's schema, every per-policy field, persistent entries with the first SYN
drop, the memory check, the paper's checks, the figures and the `report` hook."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import requests_frame, write_run_dir

from shortfirst_lab.__main__ import main as lab_main
from shortfirst_lab.analysis import overload, overloadfigs

NAN = math.nan
PNG = b"\x89PNG\r\n\x1a\n"

TRANSIENT = """\
[experiment]
name = "tiny-transient"
policies = ["fair", "srpt"]
loads = [1.0]

[workload]
kind = "wc98like"
files = 10
requests = 100

[client]
timeout_s = 30
load_schedules = ["w1", "w2"]

[run]
duration_s = 100
warmup_s = 0
drain_timeout_s = 60
{extra}"""

PERSISTENT = """\
[experiment]
name = "tiny-persistent"
policies = ["fair", "srpt"]
loads = [{loads}]

[workload]
kind = "wc98like"
files = 10
requests = 100

[client]
timeout_s = 30
{client}

[run]
duration_s = 100
warmup_s = 0
drain_timeout_s = 60
"""


def run_requests(sizes, response_s, ttfb_s, scheduled_s=None) -> pd.DataFrame:
    """A requests.csv frame whose first byte comes `ttfb_s` after the start."""
    df = requests_frame(sizes, response_s, scheduled_s=scheduled_s)
    df["first_byte_s"] = np.where(df["outcome"] == "ok", df["start_s"] + ttfb_s, np.nan)
    return df


def health(t, **cols) -> pd.DataFrame:
    return pd.DataFrame({"t_s": np.asarray(t, dtype=float), **{k: np.asarray(v) for k, v in cols.items()}})


# W1: hand-computed answers. FAIR: four completions (1, 2, 3, 10 s; the 10 s one is the largest
# file), one failure, one request scheduled after the window (excluded); SYN drops start at 3 s.
W1_FAIR = run_requests(
    [100, 200, 300, 10_000, 50, 60], [1.0, 2.0, 3.0, 10.0, NAN, 0.5], 0.5, scheduled_s=[0, 1, 2, 3, 4, 150]
)
W1_FAIR_HEALTH = health(range(6), open_connections=[1, 5, 9, 4, 2, 0], listen_drops=[3, 3, 3, 5, 9, 9])
W1_SRPT = run_requests([100, 200, 300, 10_000], [0.1, 0.2, 0.3, 12.0], 0.05)
W1_SRPT_HEALTH = health(range(6), open_connections=[1, 3, 2, 1, 0, 0], listen_drops=[0] * 6)


def transient_dir(tmp_path: Path, extra: str = "") -> Path:
    out = tmp_path / "transient"
    out.mkdir()
    (out / "experiment.toml").write_text(TRANSIENT.format(extra=extra))
    write_run_dir(out / "runs" / "fair-load1.00-w1-rep1", W1_FAIR, W1_FAIR_HEALTH, generator={"refused": 1})
    write_run_dir(out / "runs" / "srpt-load1.00-w1-rep1", W1_SRPT, W1_SRPT_HEALTH)
    # W2: FAIR failed at the runner, SRPT's generator said invalid; both complete everything.
    w2 = run_requests([100, 100], [2.0, 4.0], 1.0)
    write_run_dir(out / "runs" / "fair-load1.00-w2-rep1", w2, None, {"status": "failed: server exited"})
    write_run_dir(out / "runs" / "srpt-load1.00-w2-rep1", w2, None, generator={"valid": False})
    return out


def test_workload_entries_follow_the_schema_with_hand_computed_values(tmp_path):
    summary, _ = overload.summarise([transient_dir(tmp_path)])
    assert [(w["name"], w["setup"]) for w in summary["workloads"]] == [("W1", "A"), ("W2", "A")]
    w1 = summary["workloads"][0]
    assert set(w1) == {"name", "setup", "fair", "srpt"}
    fair, srpt = w1["fair"], w1["srpt"]
    for m in (fair, srpt):
        assert set(overload.FIELDS) <= set(m)
    assert fair["mean_response_s"] == pytest.approx(4.0)
    assert fair["mean_ttfb_s"] == pytest.approx(0.5)
    assert fair["largest_1pct_mean_response_s"] == pytest.approx(10.0)
    assert (fair["incomplete"], fair["syn_drops"], fair["peak_open_connections"]) == (1, 6, 9)
    assert fair["valid"] is True
    # The generator's count of refusals is carried; a summary without one gives None.
    assert (fair["refused"], srpt["refused"]) == (1, None)
    assert srpt["mean_response_s"] == pytest.approx(3.15)
    assert srpt["mean_ttfb_s"] == pytest.approx(0.05)
    assert srpt["largest_1pct_mean_response_s"] == pytest.approx(12.0)
    assert (srpt["incomplete"], srpt["syn_drops"], srpt["peak_open_connections"]) == (0, 0, 3)
    w2 = summary["workloads"][1]
    assert w2["fair"]["valid"] is False and w2["srpt"]["valid"] is False
    assert w2["fair"]["mean_response_s"] == pytest.approx(3.0) and w2["fair"]["syn_drops"] is None
    assert summary["persistent"] == []
    run = {r["run"]: r for r in summary["runs"]}["fair-load1.00-w1-rep1"]
    assert run["first_syn_drop_s"] == 3.0 and run["workload"] == "W1" and run["schedule"] == "w1"


def test_checks_set_the_paper_beside_the_measurement(tmp_path):
    summary, _ = overload.summarise([transient_dir(tmp_path)])
    checks = {c["claim"]: c for c in summary["checks"]}
    c = checks["W1 baseline: FAIR/SRPT mean response time >= 5"]
    assert c["measured"] == pytest.approx(4.0 / 3.15) and c["met"] is False and "8" in c["paper"]
    c = checks["W1 baseline: FAIR/SRPT time to first byte >= 5"]
    assert c["measured"] == pytest.approx(10.0) and c["met"] is True
    c = checks["W1 setup A: largest 1% SRPT/FAIR <= 1.1"]
    assert c["measured"] == pytest.approx(1.2) and c["met"] is False
    assert checks["W2 baseline: FAIR/SRPT mean response time in [1.5, 8]"]["measured"] == pytest.approx(1.0)


def test_repeats_are_averaged_and_a_missing_run_is_listed(tmp_path):
    out = transient_dir(tmp_path)
    text = (out / "experiment.toml").read_text().replace("loads = [1.0]", "loads = [1.0]\nrepeats = 2")
    (out / "experiment.toml").write_text(text)
    # Repeat 2 of W1: FAIR twice as slow, SRPT identical; W2's repeat 2 missing.
    slow = W1_FAIR.copy()
    slow["done_s"] = slow["start_s"] + 2 * (slow["done_s"] - slow["start_s"])
    write_run_dir(out / "runs" / "fair-load1.00-w1-rep2", slow, W1_FAIR_HEALTH)
    write_run_dir(out / "runs" / "srpt-load1.00-w1-rep2", W1_SRPT, W1_SRPT_HEALTH)
    summary, _ = overload.summarise([out])
    w1 = summary["workloads"][0]
    assert w1["fair"]["mean_response_s"] == pytest.approx((4.0 + 8.0) / 2) and w1["fair"]["repeats"] == 2
    assert w1["srpt"]["runs"] == ["srpt-load1.00-w1-rep1", "srpt-load1.00-w1-rep2"]
    assert sorted(Path(m).name for m in summary["missing"]) == [
        "fair-load1.00-w2-rep2",
        "srpt-load1.00-w2-rep2",
    ]


def test_a_directory_without_raw_files_is_refused_and_left_alone(tmp_path):
    out = transient_dir(tmp_path)
    for run in (out / "runs").iterdir():
        shutil.rmtree(run)
    (out / "summary.json").write_text("{}")
    with pytest.raises(overload.OverloadError, match="no run has its raw files"):
        overload.build(out, with_figures=False)
    assert (out / "summary.json").read_text() == "{}"
    assert not (out / "report.html").exists()


def test_setups_name_their_entries(tmp_path):
    out = tmp_path / "factors"
    out.mkdir()
    (out / "experiment.toml").write_text(
        TRANSIENT.format(extra="\n[setups.E]\nclient.requests_per_connection = 5\n").replace(
            '["w1", "w2"]', '["w1"]'
        )
    )
    write_run_dir(out / "runs" / "fair-load1.00-w1-setupE-rep1", W1_FAIR, W1_FAIR_HEALTH)
    write_run_dir(out / "runs" / "srpt-load1.00-w1-setupE-rep1", W1_SRPT, W1_SRPT_HEALTH)
    summary, _ = overload.summarise([transient_dir(tmp_path), out])
    assert [(w["name"], w["setup"]) for w in summary["workloads"]] == [("W1", "A"), ("W1", "E"), ("W2", "A")]
    assert summary["workloads"][1]["fair"]["mean_response_s"] == pytest.approx(4.0)


def rss_health(first_syn_drop_at: int | None, rss_mib: list[float], admin: list[int]) -> pd.DataFrame:
    t = np.arange(len(rss_mib)) * 30.0
    drops = [0 if first_syn_drop_at is None or x < first_syn_drop_at else 4 for x in t]
    return health(
        t,
        open_connections=np.arange(len(t)),
        listen_drops=drops,
        server_rss_bytes=np.asarray(rss_mib) * 2**20,
        admin_ok=admin,
    )


def persistent_dir(tmp_path: Path, name: str, loads: str, client: str, prefix: str) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "experiment.toml").write_text(PERSISTENT.format(loads=loads, client=client))
    reqs = run_requests([100, 200], [1.0, 3.0], 0.2)
    # FAIR: first SYN drop at 60 s; memory 10 → 12 MiB after a minute → 15 MiB (1.25x); admin up.
    write_run_dir(out / "runs" / f"fair-{prefix}-rep1", reqs, rss_health(60, [10, 11, 12, 13, 15], [1] * 5))
    # SRPT: no SYN drop; memory doubles after the first minute (2x), and one admin probe failed.
    write_run_dir(
        out / "runs" / f"srpt-{prefix}-rep1", reqs, rss_health(None, [10, 10, 10, 15, 20], [1, 1, 0, 1, 1])
    )
    return out


@pytest.mark.parametrize(
    ("loads", "client", "prefix", "rho"),
    [("1.2", "", "load1.20", 1.2), ("1.0", 'load_schedules = ["const@1.4"]', "load1.00-const1.4", 1.4)],
)
def test_persistent_entries_and_the_memory_check(tmp_path, loads, client, prefix, rho):
    out = persistent_dir(tmp_path, "persistent", loads, client, prefix)
    summary, _ = overload.summarise([out])
    assert summary["workloads"] == []
    by = {p["policy"]: p for p in summary["persistent"]}
    assert set(by) == {"fair", "srpt"} and all(p["rho"] == rho for p in by.values())
    assert set(overload.FIELDS) | {"rho", "policy", "first_syn_drop_s"} <= set(by["fair"])
    assert by["fair"]["first_syn_drop_s"] == 60.0 and by["srpt"]["first_syn_drop_s"] is None
    assert by["fair"]["syn_drops"] == 4 and by["fair"]["mean_response_s"] == pytest.approx(2.0)
    assert by["fair"]["rss"][0]["rss_growth"] == pytest.approx(15 / 12)
    assert by["srpt"]["rss"][0]["rss_growth"] == pytest.approx(2.0)
    checks = {c["claim"]: c for c in summary["checks"]}
    later = checks[f"persistent rho={rho:g}: SRPT's first SYN drop >= 10x later than FAIR's"]
    # No drop in the whole run: a lower bound, 2x here, too short a run to show 10x.
    assert later["met"] is None and later["measured"] == pytest.approx(120 / 60)
    assert "too short to show 10x" in later["note"]
    assert (
        checks[f"persistent rho={rho:g} fair 100 s run 1: RSS end/after 1 min <= 1.5, admin up"]["met"]
        is True
    )
    assert (
        checks[f"persistent rho={rho:g} srpt 100 s run 1: RSS end/after 1 min <= 1.5, admin up"]["met"]
        is False
    )


def test_runs_of_servers_with_different_connection_limits_are_entries_of_their_own(tmp_path):
    default = persistent_dir(tmp_path, "persistent", "1.2", "", "load1.20")
    apache = persistent_dir(tmp_path, "persistent-apache", "1.2", "", "load1.20")
    exp = apache / "experiment.toml"
    exp.write_text(exp.read_text() + '\n[server]\nmax_connections = 350\nat_max_connections = "wait"\n')
    summary, runs = overload.summarise([default, apache])
    by = {(p["policy"], p["max_connections"]): p for p in summary["persistent"]}
    assert set(by) == {("fair", None), ("srpt", None), ("fair", 350), ("srpt", 350)}
    assert all(p["repeats"] == 1 for p in by.values())
    assert by[("fair", 350)]["at_max_connections"] == "wait"
    assert by[("fair", None)]["at_max_connections"] is None
    assert by[("fair", 350)]["runs"] == by[("fair", None)]["runs"], "same run names, other server"
    later = [c for c in summary["checks"] if "first SYN drop" in c["claim"]]
    assert [c["max_connections"] for c in later] == [None, 350], "one check per server"
    assert "at most 350 connections (wait)" in later[1]["claim"]
    names = {overloadfigs.persistent_name(r, overloadfigs.run_lengths(runs)) for r in runs}
    assert names == {"rho1.2", "rho1.2-max350"}
    # Two directories of one server pool as repeats.
    again = persistent_dir(tmp_path, "persistent-again", "1.2", "", "load1.20")
    summary, _ = overload.summarise([default, again])
    assert {p["policy"]: p["repeats"] for p in summary["persistent"]} == {"fair": 2, "srpt": 2}


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        # Shorter than a minute: against the first sample; admin up throughout.
        ({"t_s": [0, 1, 2], "server_rss_bytes": [100, 120, 130], "admin_ok": [1, 1, 1]},
         {"rss_after_1min_bytes": 100, "rss_end_bytes": 130, "rss_growth": 1.3,
          "admin_answered_throughout": True}),
        # Samples after the server exited (RSS 0) do not count as its end; a missed probe shows.
        ({"t_s": [0, 60, 90, 120], "server_rss_bytes": [50, 80, 100, 0], "admin_ok": [1, 1, 0, 0]},
         {"rss_after_1min_bytes": 80, "rss_end_bytes": 100, "rss_growth": 1.25, "rss_end_s": 90.0,
          "admin_answered_fraction": 0.5, "admin_answered_throughout": False}),
        # An empty probe cell (no answer recorded) is a miss.
        ({"t_s": [0, 61], "server_rss_bytes": [10, 10], "admin_ok": [1, NAN]},
         {"rss_reference_s": 61.0, "rss_growth": 1.0, "admin_answered_throughout": False}),
        # No memory column: nothing claimed.
        ({"t_s": [0, 1]}, {}),
    ],
)  # fmt: skip
def test_rss_check_table(rows, want):
    got = overload.rss_check(pd.DataFrame(rows))
    if not want:
        assert got == {}
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k


def test_build_writes_summary_report_and_figures(tmp_path):
    dirs = [transient_dir(tmp_path), persistent_dir(tmp_path, "persistent", "1.2", "", "load1.20")]
    out = tmp_path / "overload"
    summary = overload.build(dirs, out)
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert set(on_disk) >= {"workloads", "persistent", "checks", "runs", "missing"}
    figs = sorted(p.name for p in (out / "figures").iterdir())
    assert figs == [
        "memory-rho1.2.png", "size-W1-A.png", "size-W2-A.png", "size-rho1.2.png",
        "timeline-W1-A.png", "timeline-W2-A.png", "timeline-rho1.2.png", "workloads.png",
    ]  # fmt: skip
    for f in figs:
        data = (out / "figures" / f).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, f
    page = (out / "report.html").read_text()
    assert all(f'src="figures/{f}"' in page for f in figs)
    assert not list(out.rglob("*.tmp")), "nothing half-written left behind"


def test_command_line_and_the_report_hook(tmp_path, capsys):
    t = transient_dir(tmp_path)
    assert lab_main(["report", str(t)]) == 0
    assert "W1" in capsys.readouterr().out
    assert json.loads((t / "summary.json").read_text())["workloads"][0]["name"] == "W1"
    p = persistent_dir(tmp_path, "persistent", "1.2", "", "load1.20")
    assert overload.main([str(t), str(p), "--out", str(tmp_path / "all")]) == 0
    assert len(json.loads((tmp_path / "all" / "summary.json").read_text())["persistent"]) == 2
    assert lab_main(["overload", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "experiment.toml: missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        overload.main([str(t), str(p)])  # several directories need --out


def test_a_longer_run_of_the_same_rho_is_an_entry_of_its_own(tmp_path):
    p = persistent_dir(tmp_path, "persistent", "1.2", "", "load1.20")
    long = tmp_path / "long"
    long.mkdir()
    text = PERSISTENT.format(loads="1.2", client="").replace('["fair", "srpt"]', '["srpt"]')
    (long / "experiment.toml").write_text(text.replace("duration_s = 100", "duration_s = 1800"))
    reqs = run_requests([100], [9.0], 0.2)
    write_run_dir(long / "runs" / "srpt-load1.20-rep1", reqs, rss_health(None, [10] * 70, [1] * 70))
    summary, _ = overload.summarise([p, long])
    got = [(e["rho"], e["policy"], e["duration_s"], e["mean_response_s"]) for e in summary["persistent"]]
    assert got == [(1.2, "fair", 100.0, 2.0), (1.2, "srpt", 100.0, 2.0), (1.2, "srpt", 1800.0, 9.0)]
    claims = [c["claim"] for c in summary["checks"] if "first SYN drop" in c["claim"]]
    assert claims == ["persistent rho=1.2: SRPT's first SYN drop >= 10x later than FAIR's"]
    memory = {c["claim"]: c["met"] for c in summary["checks"] if "RSS" in c["claim"]}
    assert memory["persistent rho=1.2 srpt 1800 s run 1: RSS end/after 1 min <= 1.5, admin up"] is True
    assert memory["persistent rho=1.2 srpt 100 s run 1: RSS end/after 1 min <= 1.5, admin up"] is False


def test_no_syn_drop_under_fair_is_not_measurable_and_says_why(tmp_path):
    out = tmp_path / "persistent"
    out.mkdir()
    (out / "experiment.toml").write_text(PERSISTENT.format(loads="1.2", client=""))
    reqs = run_requests([100, 200], [1.0, 3.0], 0.2)
    for policy in ("fair", "srpt"):
        write_run_dir(out / "runs" / f"{policy}-load1.20-rep1", reqs, rss_health(None, [10] * 5, [1] * 5))
    summary, _ = overload.summarise([out])
    later = next(c for c in summary["checks"] if "first SYN drop" in c["claim"])
    assert later["met"] is None and later["measured"] is None
    assert later["note"] == "FAIR dropped no SYN in 120 s, SRPT none in 120 s"
    assert "not measured (FAIR dropped no SYN in 120 s, SRPT none in 120 s)" in overload.format_table(summary)


def _persistent(rho, policy, runs, mean_s):
    rss = {"rss_growth": 1.2, "admin_answered_throughout": True, "rss_end_s": 600.0}
    return {
        **dict.fromkeys(("first_syn_drop_s",)),
        "rho": rho,
        "policy": policy,
        "setup": "A",
        "duration_s": 600.0,
        "mean_response_s": mean_s,
        "mean_ttfb_s": mean_s / 2,
        "largest_1pct_mean_response_s": 1.0,
        "incomplete": 0,
        "syn_drops": 0,
        "peak_open_connections": 10,
        "valid": True,
        "runs": runs,
        "rss": [rss],
    }


def test_carry_over_stands_in_for_runs_whose_raw_files_are_gone():
    gone = "results/p/runs/fair-load1.20-rep1"
    fresh = {
        "workloads": [],
        "persistent": [_persistent(1.4, "fair", ["fair-load1.40-rep1"], 9.0)],
        "runs": [{"run": "fair-load1.40-rep1", "dir": "results/p/runs/fair-load1.40-rep1"}],
        "checks": [],
        "experiments": [],
        "missing": [gone, "results/p/runs/srpt-load1.20-rep1"],
    }
    previous = {
        "workloads": [],
        "persistent": [
            _persistent(1.2, "fair", ["fair-load1.20-rep1"], 5.0),
            _persistent(1.4, "fair", ["fair-load1.40-rep1"], 7.0),  # measured afresh: not carried
            _persistent(1.2, "srpt", ["srpt-load1.20-rep1", "srpt-load1.20-rep2"], 0.3),  # rep2 unknown
        ],
        "runs": [{"run": "fair-load1.20-rep1", "dir": gone}, {"run": "x", "dir": "results/other/x"}],
    }
    out = overload.carry_over(fresh, previous, "old/summary.json")
    got = [(e["rho"], e["policy"], e["mean_response_s"], e.get("carried_from")) for e in out["persistent"]]
    assert got == [(1.4, "fair", 9.0, None), (1.2, "fair", 5.0, "old/summary.json")]
    assert [r["run"] for r in out["runs"]] == ["fair-load1.40-rep1", "fair-load1.20-rep1"]
    assert out["missing"] == ["results/p/runs/srpt-load1.20-rep1"]
    rss_checks = [(c["rho"], c["policy"]) for c in out["checks"] if "RSS" in c["claim"]]
    assert rss_checks == [(1.4, "fair"), (1.2, "fair")], "checks recomputed over the carried entries"
