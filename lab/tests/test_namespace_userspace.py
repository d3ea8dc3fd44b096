"""The user-space uplink scheduler through a real shaped link, end to end.

The testbed of test_namespace_srpt.py (server and client namespaces, 10 Mbit
uplink, reno), but the uplink is a plain token bucket (``tc … tbf``: no HTB, no
bands, one FIFO) and the server orders its own writes (``serve --scheduler user
--uplink-rate 10mbit``). A 20 KB response requested while eight 1 MB responses
download finishes at least 3x sooner under user-space ``srpt`` than under
user-space ``fair`` (medians over alternating trials, four fetches per trial),
and the token bucket never drops: the pacer keeps the queue in the server.

Needs root: skipped with a message otherwise. About 40 s.
"""

from __future__ import annotations

import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.runners import downloads

TRIALS = 2

pytestmark = NEEDS_ROOT


@pytest.fixture(scope="module")
def result() -> downloads.Result:
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    return downloads.run(BIN, trials=TRIALS, scheduler="user")


def test_every_trial_is_valid(result):
    assert result.scheduler == "user"
    assert len(result.trials) == 2 * TRIALS
    for t in result.trials:
        assert t.overlapped, t
        # Every byte crossed the token bucket, headers and framing (~5%) included.
        payload = result.n_large * result.large_bytes + result.small_bytes
        assert payload <= t.band_bytes[1] < payload * 1.3, t.band_bytes


def test_user_space_srpt_serves_the_short_response_at_least_3x_sooner(result):
    fair, srpt = result.median_small_s("fair"), result.median_small_s("srpt")
    trials = [(t.policy, [round(x, 3) for x in t.small_s]) for t in result.trials]
    message = f"20 KB response: fair {fair:.3f} s, srpt {srpt:.3f} s, ratio {fair / srpt:.2f}; {trials}"
    print(message)
    assert fair >= 3 * srpt, message


def test_the_pacer_keeps_the_token_bucket_from_dropping(result):
    """The pacer runs under the link's rate, so the FIFO below never overflows."""
    for t in result.trials:
        assert t.band_drops[1] == 0, t.band_drops


def test_long_downloads_keep_the_link_busy(result):
    """Work conservation: the eight 1 MB downloads (8 MB + ~5% framing at 10 Mbit/s
    ≈ 7 s) are not slowed by the scheduler beyond the pacer's 2% margin and
    slow start, under either policy."""
    for t in result.trials:
        assert max(t.large_s) < 9.0, (t.policy, t.large_s)
