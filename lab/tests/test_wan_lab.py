"""The lab's WAN mode end to end, in real namespaces with the real binary:

- a WAN testbed gives each client group its own RTT (median TCP connect time from the
  group's address within 5% + 1 ms of the configured RTT) behind the shaped uplink, and the
  emulator accounts for every packet;
- the two-group smoke experiment, shortened, runs with ``python -m shortfirst_lab run`` and
  writes groups.json (client ids as in requests.csv, configured and measured RTT and loss),
  netem.json, and a report that splits response times by group.

Needs root and the release build; skipped otherwise. ~2 min.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.runners import wanrun
from shortfirst_lab.testbed import bed as testbed

REPO = Path(__file__).resolve().parents[2]

pytestmark = [*NEEDS_ROOT, pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built (make build)")]


def test_wan_testbed_gives_each_group_its_rtt(tmp_path):
    groups = [testbed.GroupPath("near", 30.0), testbed.GroupPath("far", 120.0, 0.0, 0.01)]
    with testbed.Testbed(
        testbed.new_run_id(), 10_000_000, shortfirst_bin=BIN, congestion_control="reno", groups=groups,
        netem_dir=tmp_path,
    ) as tb:  # fmt: skip
        assert set(tb.group_addrs) == {"near", "far"}
        tb.server_popen([sys.executable, "-m", "shortfirst_lab", "probe", "accept-loop", "5001"])
        rtts = wanrun.measure_rtts(_WaitForListener(tb, 5001), 5001)
        for g in groups:
            got = rtts[g.name]["rtt_ms"]
            assert g.rtt_ms <= got <= g.rtt_ms * 1.05 + 1.0, (g.name, rtts[g.name])
        # The uplink is still the server's HTB tree: the testbed's health sample reads it.
        assert tb.health_sample()["band_bytes"]
        stats = tb.stop_emulator()
    assert stats["conservation_violations"] == []
    assert stats["tun"]["tx_dropped"] == 0
    assert {ln["group"] for ln in stats["netem"]["lines"]} == {"near", "far"}


class _WaitForListener:
    """The testbed, once something listens on ``port`` in the server namespace."""

    def __init__(self, tb: testbed.Testbed, port: int):
        code = (
            "import socket,time\nfor _ in range(200):\n"
            f"  try: socket.create_connection(({tb.server_addr!r},{port}),timeout=1).close(); break\n"
            "  except OSError: time.sleep(0.05)\n"
        )
        tb.client_run([sys.executable, "-c", code], check=True, timeout=30)
        self._tb = tb

    def __getattr__(self, name):
        return getattr(self._tb, name)


def test_wan_smoke_experiment_writes_groups_json(tmp_path):
    out = tmp_path / "out"
    overrides = [
        "run.duration_s=10", "run.warmup_s=1", "run.drain_timeout_s=70", "experiment.loads=[0.5]",
        "workload.requests=4000", "workload.files=500", "calibration.sizes=3", "calibration.repeats=1",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "shortfirst_lab", "run", str(REPO / "lab/experiments/wan-smoke.toml")]
    argv += ["--out", str(out), "--bin", str(BIN)]
    for ov in overrides:
        argv += ["--set", ov]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert {run["policy"] for run in summary["runs"]} == {"fair", "srpt"}
    for run_dir in sorted((out / "runs").iterdir()):
        assert json.loads((run_dir / "run.json").read_text())["status"] == "ok", run_dir
        groups = json.loads((run_dir / "groups.json").read_text())["groups"]
        assert [g["name"] for g in groups] == ["near", "far"]
        assert [(g["rtt_ms"], g["jitter_ms"], g["loss"]) for g in groups] == [
            (40.0, 0.0, 0.0),
            (200.0, 0.0, 0.02),
        ]
        ids = [c for g in groups for c in g["clients"]]
        assert sorted(ids) == list(range(64))
        requests = pd.read_csv(run_dir / "requests.csv")
        assert set(requests["client"]) <= set(ids)
        for g in groups:
            assert g["rtt_ms"] <= g["measured"]["rtt_ms"] <= g["rtt_ms"] * 1.05 + 1.0, g
        far = groups[1]["measured"]
        assert far["packets_down"] > 100 and 0.0 < far["loss_down"] < 0.1, far
        assert groups[0]["measured"]["loss_down"] == 0.0
        netem = json.loads((run_dir / "netem.json").read_text())
        assert netem["conservation_violations"] == []
    per_group = {g["name"]: g for g in summary["runs"][0]["groups"]}
    # 160 ms more RTT costs the far group at least a few round trips per request.
    assert per_group["far"]["mean_response_s"] > per_group["near"]["mean_response_s"] + 0.3
    assert "Client groups" in (out / "report.html").read_text()
