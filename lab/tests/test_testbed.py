"""The namespace testbed: set-up and teardown leave nothing behind (also after a
crash), leftovers of live runs are spared, and the shaped uplink classifies
sockets by SO_PRIORITY into strict-priority bands.

Needs root (network namespaces, tc): skipped with a message otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.spec import vocabulary
from shortfirst_lab.testbed import bed as tb
from shortfirst_lab.testbed.bed import Testbed, TestbedError, cleanup_leftovers, new_run_id

REPO = Path(__file__).resolve().parents[2]
RATE_10_MBIT = 10_000_000

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and tc (CI runs as root)"),
]


@pytest.fixture(scope="module")
def shortfirst_bin() -> Path:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    return BIN


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {link["ifname"] for link in json.loads(out)}


def traces_of(run_id: str) -> list[str]:
    """Everything of a run that is still visible from the root namespace."""
    tag = f"{tb.PREFIX}{run_id}-"
    found = [n for n in netns_names() if n.startswith(tag)]
    found += [n for n in root_links() if n.startswith(tag)]
    if tb._lock_path(tb.PREFIX, run_id).exists():
        found.append(str(tb._lock_path(tb.PREFIX, run_id)))
    return found


def probe(*args: str) -> list[str]:
    return [sys.executable, "-m", "shortfirst_lab", "probe", *args]


def test_build_and_teardown_leave_nothing(shortfirst_bin):
    run_id = new_run_id()
    with Testbed(
        run_id,
        RATE_10_MBIT,
        n_clients=2,
        shortfirst_bin=shortfirst_bin,
        accept_queue=512,
        queue_packets=77,
        congestion_control="reno",
        initial_cwnd=4,
    ) as bed:
        assert {bed.server_ns, bed.switch_ns, *bed.client_ns} <= netns_names()
        assert all(len(d) <= 15 for d in [bed.server_dev, *bed.client_devs])
        # The uplink is ours, with band 0 plus the data bands of serve's default cutoffs.
        stats = bed.uplink_stats()
        assert stats["rate_bits_per_s"] == RATE_10_MBIT
        bands = 1 + vocabulary.default_data_bands()
        assert [b["band"] for b in stats["bands"]] == list(range(bands))
        qdiscs = json.loads(bed_exec(bed.server_ns, ["tc", "-j", "qdisc", "show", "dev", bed.server_dev]))
        assert sorted(q["kind"] for q in qdiscs) == ["htb"] + ["pfifo"] * bands
        assert all(q["options"]["limit"] == 77 for q in qdiscs if q["kind"] == "pfifo")
        # Offloads off on both ends of every veth, MTU 1500.
        for ns, dev in [(bed.server_ns, bed.server_dev), (bed.switch_ns, bed.server_dev + "p")] + [
            (bed.client_ns[i], bed.client_devs[i]) for i in range(2)
        ]:
            features = bed_exec(ns, ["ethtool", "-k", dev])
            for feature in ("tcp-segmentation", "generic-segmentation", "generic-receive"):
                feature += "-offload"
                assert f"{feature}: off" in features, f"{feature} on {dev}"
            link = json.loads(bed_exec(ns, ["ip", "-d", "-j", "link", "show", "dev", dev]))[0]
            assert link["mtu"] == 1500
            if dev == bed.server_dev:
                assert link["gso_max_segs"] == 1, "the uplink sees MTU-sized packets only"
        # Accept queue limits in the server namespace only.
        somaxconn = bed.server_run(["sysctl", "-n", "net.core.somaxconn"], capture_output=True, text=True)
        assert somaxconn.stdout.strip() == "512"
        cc = bed.server_run(
            ["sysctl", "-n", "net.ipv4.tcp_congestion_control"], capture_output=True, text=True
        )
        assert cc.stdout.strip() == "reno"
        assert "initcwnd 4" in bed_exec(bed.server_ns, ["ip", "route", "show"])
        # Every client namespace: the whole port range and TIME_WAIT reuse (see CLIENT_SYSCTLS).
        for ns in bed.client_ns:
            ports = bed_exec(ns, ["sysctl", "-n", "net.ipv4.ip_local_port_range"]).split()
            assert ports == ["1024", "65535"]
            assert bed_exec(ns, ["sysctl", "-n", "net.ipv4.tcp_tw_reuse"]).strip() == "1"
        # Both clients reach the server (the constructor checked it too) and health sampling works.
        sample = bed.health_sample()
        assert sample["listen_overflows"] >= 0 and set(sample["band_bytes"]) == set(range(bands))
        assert traces_of(run_id), "the run is visible while open"
    assert traces_of(run_id) == []


def bed_exec(ns: str, argv: list[str]) -> str:
    out = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True)
    return out.stdout


def test_cleanup_after_a_crash_and_sparing_live_runs(shortfirst_bin, tmp_path):
    """A process builds a testbed, starts a server-side process, and is SIGKILLed:
    its namespaces stay behind until cleanup_leftovers removes them. A live
    testbed open at the same time is not touched."""
    crashed_id, live_id = new_run_id(), new_run_id()
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from shortfirst_lab.testbed.bed import Testbed
            bed = Testbed({crashed_id!r}, {RATE_10_MBIT}, shortfirst_bin={str(shortfirst_bin)!r})
            bed.server_popen(["sleep", "300"])
            print("ready", flush=True)
            time.sleep(300)
            """
        )
    )
    with Testbed(live_id, RATE_10_MBIT, shortfirst_bin=shortfirst_bin) as live:
        # The child's Testbed runs cleanup_leftovers too: the live run survives it.
        child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        left = traces_of(crashed_id)
        assert f"{tb.PREFIX}{crashed_id}-srv" in left, left
        removed = cleanup_leftovers()
        assert f"{tb.PREFIX}{crashed_id}-srv" in removed
        assert not any(live_id in name for name in removed), removed
        assert traces_of(crashed_id) == []
        assert live.server_ns in netns_names(), "the live run survives cleanup"
        live.uplink_stats()
    assert traces_of(live_id) == []


def test_a_crashed_farm_leaves_its_hosts_to_cleanup(shortfirst_bin, tmp_path):
    """A farm testbed's host namespaces (each with its own shaped uplink, reachable from the
    front) are a run's like the others: left by a SIGKILLed run, removed by cleanup_leftovers."""
    run_id = new_run_id()
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from shortfirst_lab.testbed.farmbed import FarmTestbed
            bed = FarmTestbed({run_id!r}, {RATE_10_MBIT}, 2, shortfirst_bin={str(shortfirst_bin)!r})
            bands = 1 + {vocabulary.default_data_bands()}
            assert [len(bed.host_uplink_stats(i)["bands"]) for i in range(2)] == [bands, bands]
            assert bed.uplink_stats()["rate_bits_per_s"] == 2 * {RATE_10_MBIT}
            bed.host_popen(1, ["sleep", "300"])
            print("ready", flush=True)
            time.sleep(300)
            """
        )
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    hosts = {f"{tb.PREFIX}{run_id}-h0", f"{tb.PREFIX}{run_id}-h1"}
    assert hosts <= set(traces_of(run_id)), traces_of(run_id)
    assert hosts <= set(cleanup_leftovers())
    assert traces_of(run_id) == []


def test_run_ids_are_exclusive_and_validated(shortfirst_bin):
    run_id = new_run_id()
    with Testbed(run_id, RATE_10_MBIT, shortfirst_bin=shortfirst_bin):
        with pytest.raises(TestbedError, match="in use"):
            Testbed(run_id, RATE_10_MBIT, shortfirst_bin=shortfirst_bin)
    for bad in ["", "ABC", "toolong7", "a-b"]:
        with pytest.raises(ValueError, match="run_id"):
            Testbed(bad, RATE_10_MBIT, shortfirst_bin=shortfirst_bin)
    with pytest.raises(TestbedError, match="not found"):
        Testbed(new_run_id(), RATE_10_MBIT, shortfirst_bin="/nonexistent/shortfirst")


def test_a_failed_build_leaves_nothing(shortfirst_bin):
    """A rate the uplink refuses fails the build after the namespaces exist;
    they must be gone afterwards."""
    run_id = new_run_id()
    with pytest.raises(TestbedError, match="rate"):
        Testbed(run_id, 1_000, shortfirst_bin=shortfirst_bin)
    assert traces_of(run_id) == []


def test_priority_bands_classify_and_take_precedence(shortfirst_bin):
    """Sockets with SO_PRIORITY = BandMap's value for band b land in band b's
    class, and a higher band waits while a lower one sends."""
    so_priority = {b: (1 << 16) | (10 + b) for b in range(7)}  # BandMap::default()
    low_bytes, high_bytes = 1_500_000, 400_000
    with Testbed(new_run_id(), RATE_10_MBIT, shortfirst_bin=shortfirst_bin) as bed:
        sink = bed.client_popen(probe("sink", "5001"), stdout=subprocess.PIPE, text=True)
        assert sink.stdout.readline().strip() == "ready"
        low = bed.server_popen(
            probe("send", bed.client_addrs[0], "5001", hex(so_priority[6]), str(low_bytes)),
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.3)  # the band-6 flow fills the link
        high = bed.server_popen(
            probe("send", bed.client_addrs[0], "5001", hex(so_priority[2]), str(high_bytes), "--go"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert high.stdout.readline().strip() == "connected"
        high.stdin.write("go\n")
        high.stdin.flush()
        high_out, _ = high.communicate(timeout=60)
        assert high.returncode == 0
        low_out, _ = low.communicate(timeout=60)
        assert low.returncode == 0
        final = {b["band"]: b["bytes"] for b in bed.uplink_stats()["bands"]}
    high_s = float(high_out)
    alone_s = high_bytes * 8 / RATE_10_MBIT
    # Strict priority: the band-2 flow runs at (nearly) the full link rate
    # although the band-6 flow is backlogged all along; a fair share of the
    # link would take twice as long. (Counter deltas around the flow would
    # also count the band-6 bytes sent while the samples are taken.)
    assert high_s < 1.5 * alone_s, f"band-2 flow took {high_s:.3f} s, alone it needs {alone_s:.3f} s"
    # Counters: the bytes are where the priorities put them (frames: + headers).
    assert high_bytes <= final[2] < high_bytes * 1.1
    assert low_bytes <= final[6] < low_bytes * 1.1
    for band in (1, 3, 4, 5):
        assert final[band] == 0, final
    assert final[0] < 10_000, "band 0 carries no data"


def test_health_sample_sees_the_accept_queue_and_the_servers_memory(shortfirst_bin):
    """Connections a server has not accepted yet show as its accept queue; the server's
    resident memory is counted (the overload experiments plot both over time)."""
    listener = (
        "import socket,time\n"
        "s=socket.create_server(('0.0.0.0',7070),backlog=16)\n"
        "x=bytearray(8<<20)\n"  # 8 MiB touched: visible in the RSS
        "time.sleep(60)\n"
    )
    with Testbed(new_run_id(), RATE_10_MBIT, shortfirst_bin=shortfirst_bin) as bed:
        bed.server_popen([sys.executable, "-c", listener])
        connect = (
            "import socket,sys,time\n"
            "for _ in range(200):\n"
            "  try: socket.create_connection((sys.argv[1],7070),timeout=1).close(); break\n"
            "  except OSError: time.sleep(0.05)\n"
            "held=[socket.create_connection((sys.argv[1],7070),timeout=5) for _ in range(3)]\n"
            "print('ok',flush=True); time.sleep(30)\n"
        )
        client = bed.client_popen(
            [sys.executable, "-c", connect, bed.server_addr], stdout=subprocess.PIPE, text=True
        )
        assert client.stdout.readline().strip() == "ok"
        deadline = time.monotonic() + 10
        while (sample := bed.health_sample())["accept_queue"] < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        # The probe's first connection (closed) and the three held ones wait to be accepted.
        assert sample["accept_queue"] == 4, sample
        assert sample["server_rss_bytes"] > 8 << 20, sample
        assert sample["syncookies_sent"] == 0 and sample["reqq_full_drops"] == 0
