"""``shortfirst netem`` against independent physics, in real namespaces:

- RTT: the median TCP connect time (SYN -> SYN-ACK, kernel TCP, wall clock)
  is within +-5% of the configured RTT at 20, 100 and 350 ms, and with jitter;
  never below the configured RTT when there is no jitter;
- loss: the fraction of UDP datagrams that does not arrive, counted by the
  receiver, is within the 99% binomial interval of the configured rate, per
  direction, and equals the emulator's own loss count (no hidden drops);
- throughput under loss: one reno bulk flow at 20 ms and 1% / 5% loss on the
  data direction is within a factor 1.5 of Mathis, MSS/RTT * 1.22/sqrt(p);
- conservation: every packet the emulator read is written, counted dropped,
  or still queued; the TUN's tx_dropped stays 0 (the kernel dropped nothing
  before the emulator read it).

One path (client -- emulator -- server namespaces, reno at both ends) with one
group per case serves the whole module. Needs root; skipped otherwise. ~1 min.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.testbed import bed as testbed
from shortfirst_lab.testbed import wan

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="needs root: network namespaces and a TUN device (CI runs as root)"
    ),
]

RTT_CASES = {"r20": (20.0, 0.0), "r100": (100.0, 0.0), "r350": (350.0, 0.0), "r100j": (100.0, 20.0)}
LOSS_UP, LOSS_DOWN = 0.02, 0.05
MATHIS_CASES = {"m1": 0.01, "m5": 0.05}
MATHIS_RTT_MS = 20.0

GROUPS = [
    wan.Group(name, f"10.78.{i + 1}.0/24", rtt, jitter)
    for i, (name, (rtt, jitter)) in enumerate(RTT_CASES.items())
]
GROUPS.append(wan.Group("lossy", "10.78.10.0/24", 20.0, loss_up=LOSS_UP, loss_down=LOSS_DOWN))
GROUPS += [
    wan.Group(name, f"10.78.{20 + i}.0/24", MATHIS_RTT_MS, loss_down=p, loss_up=0.0)
    for i, (name, p) in enumerate(MATHIS_CASES.items())
]

ACCEPT_PORT, BULK_PORT, UDP_PORT = 5001, 5002, 5003


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    with wan.WanPath(testbed.new_run_id(), GROUPS, congestion_control="reno") as p:
        p.start_emulator(BIN, tmp_path_factory.mktemp("netem"), seed=7)
        p.servers = [
            p.probe_popen(p.server_ns, "accept-loop", ACCEPT_PORT),
            p.probe_popen(p.server_ns, "bulk-server", BULK_PORT, "reno"),
        ]
        for port in (ACCEPT_PORT, BULK_PORT):
            p.wait_listening(p.server_ns, port)
        yield p


@pytest.fixture(scope="module")
def final_stats(path):
    """The emulator's final counters, after every other test of the module ran
    (pytest runs tests in file order; the ones using this come last). The
    probe servers stop first and the path drains (longest one-way delay
    175 ms), so no packet reaches the TUN after the emulator is gone."""
    for proc in path.servers:
        proc.terminate()
        proc.wait(timeout=10)
    time.sleep(1.0)
    return path.stop_emulator()


@pytest.mark.parametrize("group", list(RTT_CASES))
def test_connect_time_matches_configured_rtt(path, group):
    rtt_ms, jitter_ms = RTT_CASES[group]
    src = path.client_addrs[group]
    if jitter_ms == 0:
        n, parallel, gap_s = (60 if rtt_ms < 300 else 40), 8, 0.01
    else:
        # One probe at a time, each after the previous one's last packet has
        # left: in fifo mode a packet waits for the one before it, so jitter
        # keeps its configured spread only for packets that find the line
        # empty (under traffic the delay shifts up; that is the mode's point).
        n, parallel, gap_s = 40, 1, (rtt_ms + 2 * jitter_ms) / 1000
    out = path.probe(path.client_ns, "connect-times", path.server_addr, ACCEPT_PORT, src, n, parallel, gap_s)
    # The kernel's SYN -> SYN-ACK sample is the round trip; the wall-clock
    # connect time adds this probe's wake-up, ms on a busy machine.
    samples = sorted(out["kernel_rtt_ms"])
    wall = sorted(out["rtt_ms"])
    median = statistics.median(samples)
    summary = (
        f"{group}: configured {rtt_ms}+-{jitter_ms} ms, kernel RTT median {median:.2f}, "
        f"min {samples[0]:.2f}, max {samples[-1]:.2f}; connect() median {statistics.median(wall):.2f}"
    )
    print(summary)
    assert abs(median - rtt_ms) <= 0.05 * rtt_ms, summary
    assert wall[0] >= rtt_ms - jitter_ms, summary
    if jitter_ms == 0:
        assert samples[0] >= rtt_ms, summary
    else:
        # Jitter is really applied (uniform, so the range nearly spans 2*jitter);
        # nothing arrives before its range, and 90% within it plus the path's
        # own cost (the probe's wake-up on a busy machine can add a few ms to
        # single samples, which is not the emulator's delay).
        assert samples[-1] - samples[0] > jitter_ms, summary
        p90 = samples[int(0.9 * len(samples))]
        assert rtt_ms - jitter_ms <= samples[0] and p90 <= rtt_ms + jitter_ms + 2.0, summary


def test_udp_loss_per_direction_within_99pct_binomial_interval(path):
    n, pps = 20_000, 5_000
    src = path.client_addrs["lossy"]
    before = path.emulator.dump()
    up_rx = path.probe_popen(
        path.server_ns, "udp-count", UDP_PORT, 2.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    down_rx = path.probe_popen(
        path.client_ns, "udp-count", UDP_PORT, 2.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for proc in (up_rx, down_rx):
        assert proc.stderr.readline().strip() == "ready"
    up_tx = path.popen(
        path.client_ns,
        [*_probe_argv(), "udp-send", path.server_addr, UDP_PORT, src, n, pps],
        stdout=subprocess.PIPE,
    )
    down_tx = path.popen(
        path.server_ns,
        [*_probe_argv(), "udp-send", src, UDP_PORT, path.server_addr, n, pps],
        stdout=subprocess.PIPE,
    )
    assert up_tx.wait(timeout=60) == 0 and down_tx.wait(timeout=60) == 0
    received = {}
    for name, proc in (("up", up_rx), ("down", down_rx)):
        out, _ = proc.communicate(timeout=90)
        received[name] = json.loads(out)["received"]
    after = path.emulator.dump()
    for direction, p in (("up", LOSS_UP), ("down", LOSS_DOWN)):
        lost = n - received[direction]
        lo, hi = wan.binomial_interval(n, p)
        print(
            f"{direction}: configured {p}, measured {lost / n:.4f} ({lost}/{n}), "
            f"99% interval [{lo:.4f}, {hi:.4f}]"
        )
        assert lo <= lost / n <= hi, (direction, lost, n)
        # The receiver's count agrees exactly with the emulator's: no loss
        # anywhere else (socket buffers, TUN queue, forwarding).
        counted = (
            _line(after, "lossy", direction)["dropped"]["loss"]
            - _line(before, "lossy", direction)["dropped"]["loss"]
        )
        assert counted == lost, (direction, counted, lost)


@pytest.mark.parametrize("group", list(MATHIS_CASES))
def test_reno_bulk_throughput_within_1_5x_of_mathis(path, group):
    p = MATHIS_CASES[group]
    out = path.probe(
        path.client_ns, "bulk-client", path.server_addr, BULK_PORT, path.client_addrs[group], 10.0, 2.0
    )
    predicted = wan.mathis_bits_per_s(out["mss_bytes"], MATHIS_RTT_MS / 1000, p)
    ratio = out["goodput_bits_per_s"] / predicted
    print(
        f"{group}: p={p} rtt={MATHIS_RTT_MS} ms mss={out['mss_bytes']}: measured "
        f"{out['goodput_bits_per_s'] / 1e6:.2f} Mbit/s, Mathis {predicted / 1e6:.2f} Mbit/s, "
        f"ratio {ratio:.2f}"
    )
    assert 1 / 1.5 <= ratio <= 1.5, (out, predicted)


def test_emulator_counters_show_no_hidden_drops(path, final_stats):
    assert wan.check_conservation(final_stats) == []
    tun = path.tun_counters()
    print(
        f"tun: {tun}; emulator: in {final_stats['packets_in']} out {final_stats['packets_out']} "
        f"dropped {final_stats['totals']['dropped']} cpu/packet {final_stats['cpu_per_packet_us']:.1f} us"
    )
    assert tun["tx_dropped"] == 0 and tun["tx_errors"] == 0, tun
    # The kernel handed the emulator every packet it queued on the TUN.
    assert final_stats["packets_in"] == tun["tx_packets"], (final_stats["packets_in"], tun)
    assert final_stats["totals"]["dropped"]["queue_packets"] == 0
    assert final_stats["totals"]["dropped"]["write_failed"] == 0
    # Release lateness stays well under a millisecond at the median.
    for line in final_stats["lines"]:
        if line["lateness_us"]["count"]:
            assert line["lateness_us"]["p50"] < 1_000, line


def _probe_argv() -> list[str]:
    import sys

    return [sys.executable, "-m", "shortfirst_lab", "probe"]


def _line(stats: dict, group: str, direction: str) -> dict:
    return next(ln for ln in stats["lines"] if ln["group"] == group and ln["direction"] == direction)
