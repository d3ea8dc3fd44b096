"""WAN keys of experiment files: client groups and path sweeps validate strictly; the matrix,
run names, source addresses and groups.json follow from them; per-group metrics come from the
raw logs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import EXPERIMENT_TOML

from shortfirst_lab.analysis import wanreport
from shortfirst_lab.runners import wanrun
from shortfirst_lab.spec.experiment import ExperimentError, load_experiment

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

GROUPS = """
[[client.groups]]
name = "near"
clients = 3
rtt_ms = 40
[[client.groups]]
name = "far"
clients = 1
rtt_ms = 200
jitter_ms = 10
loss = 0.02
"""


def _exp(tmp_path: Path, extra: str, clients: int = 4):
    text = EXPERIMENT_TOML + f"\n[client]\nclients = {clients}\n" + extra
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return load_experiment(p)


def _err(tmp_path: Path, extra: str, clients: int = 4) -> ExperimentError:
    with pytest.raises(ExperimentError) as e:
        _exp(tmp_path, extra, clients)
    return e.value


@pytest.mark.parametrize("name", ["wan-smoke.toml", "tocs-wan.toml"])
def test_shipped_wan_experiments_validate(name):
    exp = load_experiment(EXPERIMENTS / name)
    assert exp.wan is not None
    assert set(exp.policies) == {"fair", "srpt"}


def test_groups_parse_with_defaults_and_ids_in_file_order(tmp_path):
    exp = _exp(tmp_path, GROUPS)
    assert [(g.name, g.clients, g.path.rtt_ms, g.path.jitter_ms, g.path.loss) for g in exp.client.groups] == [
        ("near", 3, 40.0, 0.0, 0.0),
        ("far", 1, 200.0, 10.0, 0.02),
    ]
    assert exp.wan is not None and exp.wan.emulator == "shortfirst" and exp.wan.congestion_control == "reno"
    spec = exp.matrix()[0]
    groups = wanrun.run_groups(exp, spec)
    assert [(g.name, ids) for g, ids in groups] == [("near", [0, 1, 2]), ("far", [3])]
    assert spec.run_id == "fair-load0.70-rep1"  # groups do not change run names


def test_lan_experiment_has_no_wan(tmp_path):
    exp = _exp(tmp_path, "")
    assert exp.wan is None
    assert wanrun.run_groups(exp, exp.matrix()[0]) is None


def test_path_sweep_is_a_matrix_dimension(tmp_path):
    exp = _exp(
        tmp_path,
        "[wan]\npaths = [{rtt_ms = 0}, {rtt_ms = 100, loss = 0.025}]\nseed = 7\n",
    )
    ids = [s.run_id for s in exp.matrix()]
    assert ids == [
        "fair-load0.70-rtt0ms-loss0pct-rep1", "srpt-load0.70-rtt0ms-loss0pct-rep1",
        "fair-load0.70-rtt100ms-loss2.5pct-rep1", "srpt-load0.70-rtt100ms-loss2.5pct-rep1",
        "fair-load0.90-rtt0ms-loss0pct-rep1", "srpt-load0.90-rtt0ms-loss0pct-rep1",
        "fair-load0.90-rtt100ms-loss2.5pct-rep1", "srpt-load0.90-rtt100ms-loss2.5pct-rep1",
    ]  # fmt: skip
    groups = wanrun.run_groups(exp, exp.matrix()[2])
    assert [(g.name, g.rtt_ms, g.loss, ids) for g, ids in groups] == [("all", 100.0, 0.025, [0, 1, 2, 3])]
    assert exp.wan.seed == 7


@pytest.mark.parametrize(
    ("extra", "key", "expected"),
    [
        (GROUPS.replace("clients = 1", "clients = 2"), "client.groups", "summing to client.clients (4)"),
        (GROUPS.replace('"far"', '"near"'), "client.groups", "unique group names"),
        (GROUPS.replace("loss = 0.02", "loss = 0.7"), "client.groups[1].loss", "[0, 0.5]"),
        (GROUPS.replace("jitter_ms = 10", "jitter_ms = 150"), "client.groups[1].jitter_ms", "rtt_ms / 2"),
        (GROUPS.replace("rtt_ms = 40", "rtt_ms = -1"), "client.groups[0].rtt_ms", ">= 0"),
        (GROUPS.replace("rtt_ms = 40", "rtt = 40"), "client.groups[0].rtt", "groups[0].rtt_ms is required"),
        (
            GROUPS.replace("rtt_ms = 40", "rtt_ms = 40\nlatency = 3"),
            "client.groups[0].latency",
            "unknown key",
        ),
        (GROUPS.replace('name = "near"', 'name = "a b"'), "client.groups[0].name", "[A-Za-z0-9_-]"),
        (GROUPS + '[wan]\nemulator = "kernel"\n', "wan.emulator", '"shortfirst"'),
        (GROUPS + '[wan]\ncongestion_control = "cubic"\n', "wan.congestion_control", "reno or bbr"),
        (GROUPS + '[wan]\njitter_mode = "random"\n', "wan.jitter_mode", "fifo or reorder"),
        (GROUPS + "[wan]\npaths = [{rtt_ms = 10}]\n", "wan.paths", "one or the other"),
        ("[wan]\nseed = 1\n", "wan", "client.groups or wan.paths"),
        ("[wan]\npaths = [{rtt_ms = 10}, {rtt_ms = 10.0}]\n", "wan.paths", "no duplicates"),
        ("[wan]\npaths = [{rtt_ms = 10, los = 0.1}]\n", "wan.paths[0].los", "unknown key"),
        ("[wan]\npaths = [5]\n", "wan.paths", "a list of tables"),
        ("[wan]\nfoo = 1\npaths = [{rtt_ms = 1}]\n", "wan.foo", "unknown key"),
    ],
)
def test_wan_validation_names_key_and_expectation(tmp_path, extra, key, expected):
    e = _err(tmp_path, extra)
    assert e.key == key, str(e)
    assert expected in str(e), str(e)


def test_groups_survive_an_override(tmp_path):
    """With an override the stored source is re-serialised: groups must come back the same."""
    exp = _exp(tmp_path, GROUPS)
    again = load_experiment(tmp_path / "exp.toml", ["run.duration_s=50"])
    p = tmp_path / "stored.toml"
    p.write_text(again.source)
    assert load_experiment(p).client.groups == exp.client.groups


def test_overrides_can_set_a_sweep(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT_TOML)
    exp = load_experiment(p, ["wan.paths=[{rtt_ms = 50, loss = 0.01}]"])
    assert [s.path.label for s in exp.matrix()][:1] == ["rtt50ms-loss1pct"]


def test_source_addrs_cover_every_client(tmp_path):
    exp = _exp(tmp_path, GROUPS)
    groups = wanrun.run_groups(exp, exp.matrix()[0])
    path = tmp_path / "source_addrs.csv"
    flags = wanrun.source_addrs_flags(tmp_path, groups, {"near": "10.78.1.2", "far": "10.78.2.2"})
    assert flags == ["--source-addrs", f"file:{path}"]
    assert path.read_text().splitlines() == [
        "client,addr", "0,10.78.1.2", "1,10.78.1.2", "2,10.78.1.2", "3,10.78.2.2",
    ]  # fmt: skip


NETEM_STATS = {
    "netem": {
        "lines": [
            {"group": "far", "direction": "down", "rx_packets": 1000, "dropped": {"loss": 20}},
            {"group": "far", "direction": "up", "rx_packets": 400, "dropped": {"loss": 10}},
            {"group": "near", "direction": "down", "rx_packets": 0, "dropped": {"loss": 0}},
        ],
        "totals": {"dropped": {"loss": 30}},
    },
    "tun": {"tx_dropped": 0},
    "conservation_violations": [],
}


def test_groups_record_has_configured_and_measured_paths(tmp_path):
    exp = _exp(tmp_path, GROUPS)
    groups = wanrun.run_groups(exp, exp.matrix()[0])
    rec = wanrun.groups_record(
        groups, {"near": "10.78.1.2", "far": "10.78.2.2"}, {"far": {"rtt_ms": 201.5, "rtt_samples": [201.5]}},
        NETEM_STATS,
    )  # fmt: skip
    far = rec["groups"][1]
    assert (far["name"], far["rtt_ms"], far["jitter_ms"], far["loss"], far["clients"]) == (
        "far",
        200.0,
        10.0,
        0.02,
        [3],
    )
    assert far["measured"]["rtt_ms"] == 201.5
    assert far["measured"]["loss_down"] == pytest.approx(0.02)
    assert far["measured"]["loss_up"] == pytest.approx(0.025)
    assert rec["groups"][0]["measured"]["loss_down"] is None  # nothing read: no fraction
    assert rec["emulator"]["conservation_violations"] == []


def test_group_metrics_split_requests_by_client():
    w = pd.DataFrame(
        {
            "id": [0, 1, 2, 3],
            "client": [0, 1, 3, 3],
            "size_bytes": [100, 200, 300, 400],
            "start_s": [0.0, 0.0, 0.0, 0.0],
            "first_byte_s": [0.1, 0.2, 0.5, None],
            "response_s": [0.2, 0.4, 1.0, None],
        }
    )
    groups = {"groups": [
        {"name": "near", "rtt_ms": 40, "jitter_ms": 0, "loss": 0, "clients": [0, 1, 2],
         "measured": {"rtt_ms": 41}},
        {"name": "far", "rtt_ms": 200, "jitter_ms": 0, "loss": 0.02, "clients": [3], "measured": {}},
    ]}  # fmt: skip
    near, far = wanreport.group_metrics(w, groups)
    assert (near["requests"], near["completed"], near["mean_response_s"]) == (2, 2, pytest.approx(0.3))
    assert near["mean_ttfb_s"] == pytest.approx(0.15) and near["measured_rtt_ms"] == 41
    assert (far["requests"], far["completed"], far["mean_response_s"]) == (2, 1, pytest.approx(1.0))
    ratios = wanreport.compare_groups(
        [near, far], [dict(near, mean_response_s=0.6), dict(far, mean_response_s=1.0)]
    )
    assert ratios == [{"name": "near", "mean_response_ratio": pytest.approx(2.0)},
                      {"name": "far", "mean_response_ratio": pytest.approx(1.0)}]  # fmt: skip
