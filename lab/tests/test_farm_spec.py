"""The farm kind of experiment file: its [farm] section read by the one reader, what a farm
refuses, its matrix; the map `shortfirst farm map` writes read back; the simulator's farm
arguments for each dispatch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.analysis import farmreport, idealsim, wire
from shortfirst_lab.spec.reader import read_spec
from shortfirst_lab.spec.schema import SpecError

FARM = Path(__file__).resolve().parents[1] / "experiments" / "farm.toml"


def test_the_farm_file_is_a_static_experiment_with_a_farm():
    spec = read_spec(FARM)
    farm = spec.value
    assert spec.kind == "farm" and farm.hosts == 2 and farm.haproxy == "haproxy"
    assert farm.dispatch == ("roundrobin", "leastconn", "sita-e")
    assert farm.exp.arm_labels() == ("fair", "srpt/user") and farm.exp.loads == (0.5, 0.7, 0.8, 0.9)
    runs = farm.matrix()
    assert len(runs) == 4 * 3 * 2
    assert [r.run_id for r in runs[:3]] == [
        "roundrobin-fair-load0.50-rep1",
        "leastconn-fair-load0.50-rep1",
        "sita-e-fair-load0.50-rep1",
    ]
    assert runs[5].arm_label == "sita-e+srpt/user" and runs[5].run_id == "sita-e-srpt-user-load0.50-rep1"
    assert farm.to_dict()["farm"] == {"hosts": 2, "dispatch": list(farm.dispatch), "haproxy": "haproxy"}


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("experiment.loads=[0.8, 1.2]", "experiment.loads"),
        ('farm.dispatch=["sita-e", "sita-e"]', "farm.dispatch"),
        ('farm.dispatch=["random"]', "farm.dispatch[0]"),
        ("farm.hosts=1", "farm.hosts"),
        ("farm.hosts=17", "farm.hosts"),
        ('client.load_schedule="w1"', "client.load_schedule"),
        ("experiment.baseline_rerun=true", "experiment.baseline_rerun"),
        ('experiment.baselines=["fair"]', "experiment.baselines"),
        ("uplink.rto_min_ms=5", "uplink.rto_min_ms"),
        ("uplink.initial_rto_ms=100", "uplink.initial_rto_ms"),
        ("calibration.sizes=4", "calibration"),
        ("wan.paths=[{rtt_ms = 100}]", "wan.paths"),
    ],
)
def test_what_a_farm_does_not_run_is_refused_by_name(override, key):
    """(Kernel arms: the static kind refuses user-space arms in an overload experiment first.)"""
    with pytest.raises(SpecError) as e:
        read_spec(FARM, ['experiment.arms=["fair", "srpt"]', override])
    assert e.value.key == key, e.value


def test_a_farm_takes_client_groups_behind_the_wan():
    farm = read_spec(FARM.with_name("farm-wan.toml")).value
    assert [(g.name, g.clients, g.path.rtt_ms) for g in farm.exp.client.groups] == [
        ("rtt20", 16, 20),
        ("rtt50", 16, 50),
        ("rtt100", 16, 100),
        ("rtt200", 16, 200),
    ]
    assert farm.exp.wan is not None and len(farm.matrix()) == 3 * 3 * 2


def test_a_farm_without_hosts_is_refused(tmp_path):
    bad = tmp_path / "farm.toml"
    bad.write_text(FARM.read_text().replace("hosts = 2\n", ""))
    with pytest.raises(SpecError, match=r"farm\.hosts: expected this key \(it is required\)"):
        read_spec(bad)


def test_the_map_is_read_back_as_written(tmp_path):
    """`shortfirst farm map` on a small docroot: the cutoffs and every file's host."""
    if not BIN.exists():
        pytest.skip(f"{BIN} is missing: run `make build`")
    root = tmp_path / "www"
    (root / "a").mkdir(parents=True)
    for name, size in (("small.bin", 100), ("a/mid.bin", 5_000), ("big.bin", 90_000)):
        (root / name).write_bytes(b"x" * size)
    argv = [str(BIN), "farm", "map", "--root", str(root), "--hosts", "2", "--cutoffs", "5000"]
    subprocess.run([*argv, "--out", str(tmp_path / "sizes.map")], check=True, capture_output=True)
    cutoffs, host_of = farmreport.read_map(tmp_path / "sizes.map")
    assert cutoffs == [5000]
    assert host_of == {"/small.bin": 0, "/a/mid.bin": 0, "/big.bin": 1}


def test_a_map_line_of_another_shape_is_refused(tmp_path):
    p = tmp_path / "sizes.map"
    p.write_text("# host0: (0, 10] bytes\n/x.bin backend7\n")
    with pytest.raises(farmreport.FarmReportError, match=r"sizes\.map: '/x\.bin backend7': expected"):
        farmreport.read_map(p)


def test_the_simulator_dispatches_as_haproxy():
    """Blind rules by name; SITA with the map's cutoffs, mapped through the wire model for
    wire-cost jobs (wire cost grows with size, so each request stays on its host)."""
    assert idealsim.Farm(2, "least-connections").args() == {"servers": 2, "dispatch": "least-connections"}
    sita = idealsim.Farm(3, "sita", (20_000, 1_000_000))
    assert sita.args() == {"servers": 3, "dispatch": "sita:20000,1000000"}
    model = wire.WireModel(head_bytes=200, control_bytes=100)
    cut = model.cost_bytes([20_000, 1_000_000])
    assert sita.args(model)["dispatch"] == f"sita:{cut[0]},{cut[1]}" and cut[0] > 20_000


def _row(dispatch, policy, mean_s, thru, sim_s):
    return {
        "load": 0.8,
        "repeat": 1,
        "dispatch": dispatch,
        "policy": policy,
        "measured": {"mean_response_s": mean_s, "mean_slowdown": 10 * mean_s, "throughput_bytes_per_s": thru},
        "simulated": {"mean_response_s": sim_s},
        "measured_over_simulated": mean_s / sim_s,
    }


def test_the_comparisons_and_targets_of_a_farm():
    """SITA-E + SRPT against leastconn under each policy, baseline ÷ SITA-E (throughput the
    other way), and the worst measured ÷ simulated of the load's arms, against the targets."""
    rows = [
        _row("leastconn", "fair", 0.4, 1000.0, 0.3),
        _row("leastconn", "srpt", 0.13, 1000.0, 0.1),
        _row("sita-e", "fair", 0.9, 990.0, 0.5),
        _row("sita-e", "srpt", 0.1, 995.0, 0.09),
    ]
    (c,) = farmreport.comparisons(rows)
    assert c["mean_response_ratio_vs_leastconn_fair"] == pytest.approx(4.0)
    assert c["mean_response_ratio_vs_leastconn_srpt"] == pytest.approx(1.3)
    assert c["throughput_ratio_vs_leastconn_fair"] == pytest.approx(0.995)
    assert c["simulated_mean_response_ratio_vs_leastconn_fair"] == pytest.approx(0.3 / 0.09)
    assert c["measured_over_simulated_max"] == pytest.approx(1.8)
    met = {t["key"]: t["met"] for t in farmreport.target_rows([c])}
    assert met == {
        "mean_response_ratio_vs_leastconn_fair": True,
        "mean_response_ratio_vs_leastconn_srpt": True,
        "throughput_ratio_vs_leastconn_fair": True,
        "measured_over_simulated_max": False,
    }
    (none,) = farmreport.comparisons(rows[:3])  # no SITA-E + SRPT run: no ratios, not met
    assert none["mean_response_ratio_vs_leastconn_fair"] is None
    assert farmreport.target_rows([none])[0]["met"] is None
