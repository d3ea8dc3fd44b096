"""The WAN helpers that need no namespaces: the emulator config they write
(checked by ``shortfirst netem --check`` itself), namespace TCP settings, the
statistics used by the validation tests, and the conservation check."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.testbed import wan

REPO = Path(__file__).resolve().parents[2]


def test_config_is_accepted_and_resolved_by_the_emulator(tmp_path):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    groups = [
        wan.Group("near", "10.78.1.0/24", 40.0),
        wan.Group(
            "far", "10.78.2.0/24", 200.0, jitter_ms=20.0, loss=0.02, loss_up=0.0, rate_bits_per_s=10_000_000
        ),
    ]
    path = tmp_path / "netem.toml"
    path.write_text(wan.netem_config(groups, "sfwtest-t", seed=9, jitter_mode="reorder", down_fraction=1.0))
    out = subprocess.run(
        [BIN, "netem", "--config", path, "--check"], capture_output=True, text=True, check=True
    )
    cfg = json.loads(out.stdout)
    assert cfg["seed"] == 9 and cfg["jitter_mode"] == "reorder" and cfg["tun"] == "sfwtest-t"
    far = cfg["groups"][1]
    assert far["down"]["delay_ns"] == 200_000_000 and far["up"]["delay_ns"] == 0
    assert far["down"]["jitter_ns"] == 20_000_000
    assert far["down"]["loss"] == {"model": "bernoulli", "p": 0.02}
    assert far["up"]["loss"] == {"model": "bernoulli", "p": 0.0}
    assert far["down"]["rate_bits_per_s"] == 10_000_000


def test_bad_config_is_refused_naming_file_and_key(tmp_path):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    path = tmp_path / "bad.toml"
    path.write_text(wan.netem_config([wan.Group("a", "10.78.1.0/24", 40.0, loss=1.5)], "sfwtest-t"))
    out = subprocess.run([BIN, "netem", "--config", path, "--check"], capture_output=True, text=True)
    assert out.returncode != 0
    assert f"netem config {path}: group[0].loss: 1.5" in out.stderr


def test_namespace_tcp_is_named_and_sized_for_the_largest_rtt():
    s = wan.tcp_sysctls("reno", 350.0, 100e6)
    assert s["net.ipv4.tcp_congestion_control"] == "reno"
    assert s["net.ipv4.tcp_no_metrics_save"] == "1"
    # 100 Mbit/s x 350 ms = 4.375 MB in flight; the limit is twice that.
    assert s["net.ipv4.tcp_wmem"].split()[2] == str(2 * 4_375_000)
    assert s["net.ipv4.tcp_rmem"].split()[2] == str(2 * 4_375_000)
    assert wan.socket_buffer_max_bytes(20.0, 10e6) == 4 << 20
    assert "net.ipv4.tcp_congestion_control" not in wan.tcp_sysctls(None, 20.0, 10e6)
    with pytest.raises(ValueError, match="cubic"):
        wan.tcp_sysctls("cubic", 20.0, 10e6)


def test_statistics_used_by_the_validation():
    lo, hi = wan.binomial_interval(20_000, 0.05)
    assert lo == pytest.approx(0.05 - 2.576 * math.sqrt(0.05 * 0.95 / 20_000))
    assert hi == pytest.approx(0.05 + 2.576 * math.sqrt(0.05 * 0.95 / 20_000))
    # 1448 B every 20 ms at 1% loss: 579.2 kbit/s x 1.22 / 0.1.
    assert wan.mathis_bits_per_s(1448, 0.020, 0.01) == pytest.approx(7_066_240)


def _stats(rx: int, tx: int, loss: int, queued: int, packets_out: int) -> dict:
    line = {
        "group": "a",
        "direction": "down",
        "rx_packets": rx,
        "tx_packets": tx,
        "dropped": {"loss": loss, "queue_packets": 0, "queue_bytes": 0, "write_failed": 0},
        "queued_packets": queued,
    }
    return {
        "lines": [line],
        "totals": {
            "rx_packets": rx,
            "tx_packets": tx,
            "dropped": dict(line["dropped"]),
            "queued_packets": queued,
        },
        "unmatched": {"packets": 2, "bytes": 120},
        "not_ipv4": {"packets": 0, "bytes": 0},
        "packets_in": rx + 2,
        "packets_out": packets_out,
        "forward_write_failed": 0,
    }


def test_conservation_check_finds_missing_packets():
    assert wan.check_conservation(_stats(100, 90, 7, 3, 92)) == []
    assert wan.check_conservation(_stats(100, 90, 7, 2, 92))  # one packet unaccounted for
    assert wan.check_conservation(_stats(100, 90, 7, 3, 91))  # one write not counted
