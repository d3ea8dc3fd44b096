"""A farm run in namespaces, end to end: `python -m shortfirst_lab run` on a small farm
experiment (2 hosts of 10 Mbit/s behind HAProxy, roundrobin and SITA-E, FAIR, 4 s at load
0.6 per host), through the same runner, map, HAProxy configurations and report as
lab/experiments/farm.toml.

Checked from the raw logs: every request the generator sent completed, and each was served
exactly once (the hosts' access logs hold every path as often as the generator asked for
it); under SITA-E every request landed on the host the map names for its path (small files
on host 0, large on host 1, both used); under roundrobin the hosts took turns (counts within
one); HAProxy never queued (the hosts served as many as were sent); and the simulator's farm
ran on the same arrivals with the same dispatch (its per-host counts equal the measured).

The same farm with its clients in two WAN groups (20 and 80 ms behind `shortfirst netem`):
every request served once, only the groups' packets through the emulator (the hosts
and HAProxy talk over the bridge), each group's RTT measured to the front as configured, the far
group's first bytes later by at least the difference, the emulator losing nothing uncounted,
and the report's per-group table.

Needs root and HAProxy: skipped with a message otherwise. About 30 s.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pandas as pd
import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.__main__ import main
from shortfirst_lab.analysis import farmreport

pytestmark = [
    *NEEDS_ROOT,
    pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs HAProxy (`make apt` installs it)"),
]

EXPERIMENT = """
[experiment]
name = "farm-test"
arms = ["fair"]
loads = [0.6]

[farm]
hosts = 2
dispatch = ["roundrobin", "sita-e"]

[uplink]
rate = "10mbit"
congestion_control = "reno"

[workload]
kind = "wc98like"
files = 200
requests = 3000
seed = 7

[client]
timeout_s = 30

[run]
duration_s = 4
warmup_s = 0.5
drain_timeout_s = 40
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    d = tmp_path_factory.mktemp("farm")
    (d / "farm-test.toml").write_text(EXPERIMENT)
    assert main(["run", str(d / "farm-test.toml"), "--out", str(d / "out"), "--bin", str(BIN)]) == 0
    return d / "out"


def _run(out, name):
    rdir = out / "runs" / name
    rec = json.loads((rdir / "run.json").read_text())
    assert rec["status"] == "ok" and rec["sim"] == "ok", rec
    return rdir, pd.read_csv(rdir / "requests.csv"), farmreport.served_paths(rdir, 2)


@pytest.mark.parametrize("name", ["roundrobin-fair-load0.60-rep1", "sita-e-fair-load0.60-rep1"])
def test_every_request_is_served_once(out, name):
    _, req, served = _run(out, name)
    assert len(req) > 100 and (req["outcome"] == "ok").all(), req["outcome"].value_counts()
    assert Counter(served["path"]) == Counter(req["path"])


def test_sita_e_sends_each_path_to_the_host_the_map_names(out):
    rdir, req, served = _run(out, "sita-e-fair-load0.60-rep1")
    cutoffs, host_of = farmreport.read_map(out / "farm" / "sizes.map")
    assert len(cutoffs) == 1 and served["host"].nunique() == 2
    assert (served["path"].map(host_of) == served["host"]).all()
    size = dict(zip(req["path"], req["size_bytes"], strict=True))
    assert max(size[p] for p in served[served["host"] == 0]["path"]) <= cutoffs[0]
    assert min(size[p] for p in served[served["host"] == 1]["path"]) > cutoffs[0]
    sim = pd.read_csv(rdir / "sim" / "requests.csv")
    assert sorted(Counter(sim["host"]).items()) == sorted(Counter(served["host"]).items())


def test_roundrobin_takes_turns(out):
    rdir, req, served = _run(out, "roundrobin-fair-load0.60-rep1")
    counts = Counter(served["host"])
    assert abs(counts[0] - counts[1]) <= 1 and counts[0] + counts[1] == len(req)
    sim = pd.read_csv(rdir / "sim-wire" / "requests.csv")
    assert abs(Counter(sim["host"])[0] - counts[0]) <= 1


def test_the_summary_pairs_measured_with_simulated(out):
    summary = json.loads((out / "summary.json").read_text())
    assert [r["arm"] for r in summary["runs"]] == ["roundrobin+fair", "sita-e+fair"]
    for r in summary["runs"]:
        assert r["measured"]["completed"] == r["measured"]["requests"] > 0
        assert r["simulated"]["requests"] == r["measured"]["requests"]
        assert r["measured_over_simulated"] > 0.5
    sita = summary["runs"][1]
    assert sita["served_where_the_map_says"] == sita["requests_served"] == sita["requests_sent"]
    assert (out / "report.html").read_text().count("sita-e+fair") >= 1


def test_health_is_sampled_with_each_host_s_uplink(out):
    rdir, _, served = _run(out, "roundrobin-fair-load0.60-rep1")
    health = pd.read_csv(rdir / "health.csv")
    rec = json.loads((rdir / "run.json").read_text())
    assert len(health) >= 3 and rec["health_errors"] == []
    last = health.iloc[-1]
    # Round robin: both hosts sent; their bytes add up to the bands' sum over the hosts.
    assert last["host_bytes.0"] > 0 and last["host_bytes.1"] > 0
    bands = sum(last[c] for c in health.columns if c.startswith("band_bytes."))
    assert last["host_bytes.0"] + last["host_bytes.1"] == bands
    assert "host_backlog_packets.0" in health.columns and "open_connections" in health.columns


WAN_GROUPS = """
[[client.groups]]
name = "near"
clients = 32
rtt_ms = 20

[[client.groups]]
name = "far"
clients = 32
rtt_ms = 80

[wan]
emulator = "shortfirst"
seed = 3
congestion_control = "reno"
"""


@pytest.fixture(scope="module")
def wan_out(tmp_path_factory):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    d = tmp_path_factory.mktemp("farm-wan")
    text = EXPERIMENT.replace('dispatch = ["roundrobin", "sita-e"]', 'dispatch = ["sita-e"]') + WAN_GROUPS
    (d / "farm-wan.toml").write_text(text)
    assert main(["run", str(d / "farm-wan.toml"), "--out", str(d / "out"), "--bin", str(BIN)]) == 0
    return d / "out"


def test_a_farm_behind_wan_groups_serves_each_group_over_its_path(wan_out):
    rdir, req, served = _run(wan_out, "sita-e-fair-load0.60-rep1")
    assert len(req) > 100 and (req["outcome"] == "ok").all(), req["outcome"].value_counts()
    assert Counter(served["path"]) == Counter(req["path"])
    groups = {g["name"]: g for g in json.loads((rdir / "groups.json").read_text())["groups"]}
    assert groups["near"]["clients"] == list(range(32)) and groups["far"]["clients"] == list(range(32, 64))
    for g in groups.values():  # the kernel's handshake RTT to HAProxy, within a few ms of the path's
        assert abs(g["measured"]["rtt_ms"] - g["rtt_ms"]) < 5, g
    netem = json.loads((rdir / "netem.json").read_text())
    assert netem["conservation_violations"] == [] and netem["tun"]["tx_dropped"] == 0
    # Only the groups' packets crossed the emulator: the hosts and HAProxy talk over the bridge.
    assert sum(line["rx_packets"] for line in netem["netem"]["lines"]) == netem["tun"]["tx_packets"]
    ttfb = (req["first_byte_s"] - req["start_s"]).groupby(req["client"] >= 32).mean()
    assert ttfb[True] - ttfb[False] >= 0.060, ttfb


def test_the_farm_report_has_each_group(wan_out):
    summary = json.loads((wan_out / "summary.json").read_text())
    (run,) = summary["runs"]
    assert [g["name"] for g in run["groups"]] == ["near", "far"]
    assert sum(g["completed"] for g in run["groups"]) == run["measured"]["completed"]
    assert "Client groups" in (wan_out / "report.html").read_text()
