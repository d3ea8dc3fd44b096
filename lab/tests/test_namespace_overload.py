"""The overload factors take effect in real namespaces, the admin endpoint is checked from
inside the server's namespace, and a short persistent-overload run records the server's
memory and liveness through the whole run (the 30-minute check's machinery, on 20 s); a SYN
sent from synrto's cgroup waits the configured initial RTO (TCP_INFO's rto in SYN-SENT),
one from outside the kernel's 1 s.

Needs root (namespaces, qdiscs) and the release build: skipped with a message otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pandas as pd
import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import load_experiment
from shortfirst_lab.testbed import synrto

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
initial_rto_ms = 500
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
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    p = tmp_path / "factors.toml"
    p.write_text(FACTORS_TOML)
    r = runner.Runner(load_experiment(p), tmp_path / "out", BIN, progress=False)
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
    # The initial RTO's cgroup holds what the testbed starts (its effect: the test below).
    with r.initial_rto() as rto, r.testbed() as tb:
        assert rto is not None and rto.record()["ms"] == 500
        tb.launch_prefix = rto.prefix()
        proc = tb.server_popen(["cat", "/proc/self/cgroup"], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=20)
        assert f"0::/{rto.cgroup.name}" in out.splitlines(), out


def test_admin_check_sees_the_server_come_and_go(tmp_path):
    from shortfirst_lab.testbed.bed import Testbed, new_run_id

    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    root = tmp_path / "root"
    root.mkdir()
    with Testbed(new_run_id(), 10_000_000, shortfirst_bin=BIN) as tb:
        assert tb.admin_check(runner.ADMIN_PORT, timeout_s=1.0)["admin_ok"] == 0, "nothing listens yet"
        argv = [BIN, "serve", "--root", root, "--listen", f"{tb.server_addr}:8080",
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
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    p = tmp_path / "rss.toml"
    p.write_text(RSS_TOML)
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(p), out, BIN, progress=False).run()
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


SYN_SENT_RTO = """
import socket, struct, sys, time
s = socket.socket(); s.setblocking(False)
try:
    s.connect((sys.argv[1], 80))
except BlockingIOError:
    pass
time.sleep(0.05)
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
print(info[0], struct.unpack_from("<I", info, 8)[0])
"""


@pytest.mark.parametrize("ms", [500, 3000])
def test_a_syn_from_the_cgroup_waits_the_configured_rto(ms):
    ns = f"sfrto-{uuid.uuid4().hex[:6]}"
    probe = [sys.executable, "-c", SYN_SENT_RTO, "10.99.0.2"]  # routed into a TUN nobody reads
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (["link", "set", "lo", "up"], ["tuntap", "add", "dev", "t0", "mode", "tun"],
                    ["link", "set", "t0", "up"], ["addr", "add", "10.99.0.1/24", "dev", "t0"]):  # fmt: skip
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        inside = ["ip", "netns", "exec", ns, *probe]
        with synrto.InitialRto(ms) as rto:
            got = subprocess.run([*rto.prefix(), *inside], capture_output=True, text=True, check=True)
            outside = subprocess.run(inside, capture_output=True, text=True, check=True)
            cgroup = rto.cgroup
        assert got.stdout.split() == ["2", str(ms * 1000)], "SYN-SENT, the configured RTO"
        assert outside.stdout.split() == ["2", "1000000"], "the kernel's 1 s outside the cgroup"
        assert cgroup is not None and not cgroup.exists(), "the cgroup is removed on exit"
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
