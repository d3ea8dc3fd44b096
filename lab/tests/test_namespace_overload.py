"""The overload factors take effect in real namespaces, the admin endpoint is checked from
inside the server's namespace, and a short persistent-overload run records the server's
memory and liveness through the whole run (the 30-minute check's machinery, on 20 s).

Needs root (namespaces, qdiscs) and the release build: skipped with a message otherwise.
"""

from __future__ import annotations

import json
import subprocess
import time

import pandas as pd
import pytest
from conftest import NEEDS_ROOT, RELEASE_BIN

from shortfirst_lab import runner
from shortfirst_lab.experiment import load_experiment

pytestmark = NEEDS_ROOT

FACTORS_TOML = """
[experiment]
name = "factors"
policies = ["srpt"]
loads = [0.5]
[uplink]
mtu = 576
accept_queue = 128
syn_queue = 64
syncookies = "off"
synack_retries = 2
[workload]
kind = "wc98like"
files = 10
requests = 100
[client]
syn_retries = 3
[run]
duration_s = 10
"""


def _sysctl(ns_run, key: str) -> str:
    r = ns_run(["sysctl", "-n", key], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _mtu(run, dev: str) -> int:
    shown = run(["ip", "-j", "link", "show", "dev", dev], capture_output=True, text=True, timeout=20)
    return json.loads(shown.stdout)[0]["mtu"]


HOST_SYNCOOKIES = subprocess.run(
    ["sysctl", "-n", "net.ipv4.tcp_syncookies"], capture_output=True, text=True, check=False
).stdout.strip()


def test_factor_keys_reach_the_namespaces(tmp_path):
    """An experiment's SYN queue, SYN cookies, SYN(-ACK) retries and MTU, read back inside the
    namespaces the runner builds for it."""
    if not RELEASE_BIN.exists():
        pytest.fail(f"{RELEASE_BIN} is missing: run `make build` (make test does it)")
    p = tmp_path / "factors.toml"
    p.write_text(FACTORS_TOML)
    r = runner.Runner(load_experiment(p), tmp_path / "out", RELEASE_BIN, progress=False)
    with r.testbed() as tb:
        server = {k: _sysctl(tb.server_run, k) for k in (
            "net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_syncookies",
            "net.ipv4.tcp_synack_retries")}  # fmt: skip
        assert server == {
            "net.core.somaxconn": "128",
            "net.ipv4.tcp_max_syn_backlog": "64",
            "net.ipv4.tcp_syncookies": "0",
            "net.ipv4.tcp_synack_retries": "2",
        }
        assert _sysctl(tb.client_run, "net.ipv4.tcp_syn_retries") == "3"
        assert _mtu(tb.server_run, tb.server_dev) == 576
        assert _mtu(tb.client_run, tb.client_devs[0]) == 576
        # Per-namespace: meanwhile the host keeps its own SYN cookies setting.
        host = subprocess.run(["sysctl", "-n", "net.ipv4.tcp_syncookies"], capture_output=True, text=True)
        assert host.stdout.strip() == HOST_SYNCOOKIES


def test_admin_check_sees_the_server_come_and_go(tmp_path):
    from shortfirst_lab.testbed import Testbed, new_run_id

    if not RELEASE_BIN.exists():
        pytest.fail(f"{RELEASE_BIN} is missing: run `make build` (make test does it)")
    root = tmp_path / "root"
    root.mkdir()
    with Testbed(new_run_id(), 10_000_000, shortfirst_bin=RELEASE_BIN) as tb:
        assert tb.admin_check(runner.ADMIN_PORT, timeout_s=1.0)["admin_ok"] == 0, "nothing listens yet"
        argv = [RELEASE_BIN, "serve", "--root", root, "--listen", f"{tb.server_addr}:8080",
                "--admin", f"{tb.server_addr}:{runner.ADMIN_PORT}"]  # fmt: skip
        srv = tb.server_popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while (got := tb.admin_check(runner.ADMIN_PORT, timeout_s=1.0))["admin_ok"] == 0:
            assert time.monotonic() < deadline and srv.poll() is None, "the admin endpoint never answered"
            time.sleep(0.1)
        assert 0 < got["admin_latency_s"] < 1.0
        srv.terminate()
        srv.wait(timeout=15)
        assert tb.admin_check(runner.ADMIN_PORT, timeout_s=1.0)["admin_ok"] == 0


RSS_TOML = """
[experiment]
name = "rss-short"
description = "20 s of persistent overload (test of the memory and liveness record)"
policies = ["srpt"]
loads = [1.0]
seed = 2
[uplink]
rate = "10mbit"
syncookies = "off"
congestion_control = "reno"
[workload]
kind = "wc98like"
files = 500
requests = 12000
seed = 3
[client]
timeout_s = 20
load_schedules = ["const@1.4"]
[run]
duration_s = 20
warmup_s = 0
drain_timeout_s = 30
[calibration]
sizes = 2
repeats = 1
"""


def test_short_persistent_overload_records_memory_and_liveness(tmp_path):
    """The runner on 20 s at ρ = 1.4 under SRPT: health.csv has the server's RSS and an admin
    probe every second, and the overload summary reports them (the 30-minute check needs a
    run past its first minute; here every figure but the ratio's verdict is exercised)."""
    if not RELEASE_BIN.exists():
        pytest.fail(f"{RELEASE_BIN} is missing: run `make build` (make test does it)")
    p = tmp_path / "rss.toml"
    p.write_text(RSS_TOML)
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(p), out, RELEASE_BIN, progress=False).run()
    rdir = out / "runs" / "srpt-load1.00-const1.4-rep1"
    rec = json.loads((rdir / "run.json").read_text())
    assert rec["status"] == "ok" and rec["load_schedule"] == "const@1.4", rec
    h = pd.read_csv(rdir / "health.csv")
    assert len(h) >= 18 and (h["server_rss_bytes"] > 1 << 20).all()
    assert (h["admin_ok"] == 1).all(), h[["t_s", "admin_ok"]]
    assert (h["admin_latency_s"] < 2.0).all()
    s = pd.read_csv(rdir / "series.csv")
    assert s["scheduled"].sum() > 0
    (entry,) = summary["persistent"]
    assert entry["rho"] == 1.4 and entry["policy"] == "srpt"
    (rss,) = entry["rss"]
    assert rss["admin_answered_throughout"] is True and rss["rss_growth"] > 0
    assert rss["rss_end_bytes"] > 1 << 20
    assert entry["mean_response_s"] is not None and entry["peak_open_connections"] >= 1
    assert (out / "figures" / "memory-rho1.4.png").read_bytes().startswith(b"\x89PNG")
