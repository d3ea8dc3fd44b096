"""Issue 2, "What it must show" item 1: the scheduling effect through a real
shaped uplink.

Server in one namespace, client in another, HTB uplink at 10 Mbit installed by
``shortfirst uplink setup``. Under ``srpt`` a 20 KB response requested while
eight 1 MB responses are downloading finishes at least 3x sooner than under
``fair`` (medians of alternating trials), and the HTB class counters show the
bytes in the expected bands.

Needs root: skipped with a message otherwise. About 50 s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shortfirst_lab import downloads

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "target" / "release" / "shortfirst"
TRIALS = 3

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and tc (CI runs as root)"),
]


@pytest.fixture(scope="module")
def result() -> downloads.Result:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    return downloads.run(BIN, trials=TRIALS)


def data_bytes(band_bytes: dict[int, int]) -> int:
    return sum(n for band, n in band_bytes.items() if band > 0)


def test_every_trial_is_valid(result):
    assert len(result.trials) == 2 * TRIALS
    for t in result.trials:
        # The short response was measured while all long ones were still going.
        assert t.overlapped, t
        # Every response's bytes crossed the shaped uplink: 8 x 1 MB + 20 KB of
        # bodies, plus headers and per-packet framing (under 10% here).
        payload = result.n_large * result.large_bytes + result.small_bytes
        assert payload <= data_bytes(t.band_bytes) < payload * 1.1, t.band_bytes


def test_srpt_serves_the_short_response_at_least_3x_sooner(result):
    fair, srpt = result.median_small_s("fair"), result.median_small_s("srpt")
    assert fair >= 3 * srpt, f"20 KB response: fair {fair:.3f} s, srpt {srpt:.3f} s, ratio {fair / srpt:.2f}"


def test_fair_puts_all_data_in_one_band(result):
    for t in (t for t in result.trials if t.policy == "fair"):
        assert t.band_bytes[1] >= 0.99 * data_bytes(t.band_bytes), t.band_bytes


def test_srpt_bands_follow_remaining_size(result):
    """With cutoffs 1K, 2K, 5K, 20K, 50K, a 1 MB response starts in band 6 and
    drains through bands 5..1 as its remaining bytes fall below each cutoff;
    the 20 KB response starts in band 4 or 5 (headers may push it over 20,000
    bytes). So band 6 carries most bytes and every lower band carries some."""
    for t in (t for t in result.trials if t.policy == "srpt"):
        total = data_bytes(t.band_bytes)
        assert t.band_bytes[6] >= 0.8 * total, t.band_bytes
        for band in range(1, 6):
            assert t.band_bytes[band] > 0, f"band {band} carried nothing: {t.band_bytes}"
        # The draining tails: each 1 MB response sends about 50 KB below the
        # top cutoff, so bands 1..5 together carry roughly 8 x 50 KB + 20 KB.
        below_top = sum(t.band_bytes[b] for b in range(1, 6))
        assert below_top < 0.2 * total, t.band_bytes


def test_band_0_carries_set_up_only(result):
    """Band 0 gets SYN-ACKs and the ACKs sent before a response's size is known:
    small packets, a negligible share of the bytes."""
    for t in result.trials:
        band0_bytes, band0_packets = t.band_bytes[0], t.band_packets[0]
        assert band0_bytes < 0.001 * data_bytes(t.band_bytes), t.band_bytes
        if band0_packets:
            assert band0_bytes / band0_packets < 200, f"{band0_bytes} bytes in {band0_packets} packets"
