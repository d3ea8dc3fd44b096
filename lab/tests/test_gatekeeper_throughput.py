"""The gatekeeper bench's saturation rounds: wrk's report parsed, the medians over rounds and
the verdict against nginx; and one short real round set (wrk, nginx, serve, gatekeeper)."""

from __future__ import annotations

import argparse
import shutil

import pytest
from conftest import BIN

from shortfirst_lab.kit import KitError, parse_wrk
from shortfirst_lab.runners.gatekeeper.synthetic.overhead import nginx_binary
from shortfirst_lab.runners.gatekeeper.synthetic.points import Bench
from shortfirst_lab.runners.gatekeeper.synthetic.throughput import measure_throughput, summarize

WRK = """Running 5s test @ http://127.0.0.1:8080/1k.bin
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   210.00us  100.00us   5.00ms   90.00%
    Req/Sec    18.00k     1.00k   20.00k    70.00%
  Latency Distribution
     50%  180.00us
     75%  220.00us
     90%  300.00us
     99%    1.20ms
  180000 requests in 5.00s, 200.00MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  36000.00
Transfer/sec:     40.00MB
"""


def test_wrk_report_is_read_in_milliseconds():
    r = parse_wrk(WRK)
    assert r["requests_per_s"] == 36000.0 and r["requests"] == 180000 and r["non_2xx"] == 3
    assert r["latency_ms"] == {"p50": 0.18, "p75": 0.22, "p90": 0.3, "p99": 1.2}
    with pytest.raises(KitError, match="cannot parse wrk output"):
        parse_wrk("connection refused")


def _round(direct: tuple[float, float], gk: tuple[float, float], ng: tuple[float, float]) -> dict:
    def path(rps: float, p50_ms: float) -> dict:
        return {"requests_per_s": rps, "latency_ms": {"p50": p50_ms, "p99": 4 * p50_ms}}

    return {"direct": path(*direct), "gatekeeper": path(*gk), "nginx": path(*ng)}


def test_added_median_is_per_round_and_the_verdict_needs_both_figures():
    rounds = [
        _round((40_000, 0.10), (30_000, 0.30), (32_000, 0.28)),
        _round((41_000, 0.12), (31_000, 0.31), (30_000, 0.30)),
        _round((39_000, 0.11), (29_000, 0.35), (31_000, 0.29)),
    ]
    s = summarize(rounds)
    assert s["paths"]["gatekeeper"]["requests_per_s"] == 30_000
    assert s["added_median_us"]["gatekeeper"] == pytest.approx(200.0)
    assert s["added_median_us"]["nginx"] == pytest.approx(180.0)
    assert s["gatekeeper_over_nginx"]["requests_per_s"] == pytest.approx(30_000 / 31_000)
    assert not s["pass"]  # slower than nginx on both figures
    faster = [_round((40_000, 0.10), (33_000, 0.20), (32_000, 0.28))] * 3
    assert summarize(faster)["pass"]


@pytest.mark.slow
def test_a_short_round_set_measures_every_path(tmp_path):
    if not BIN.exists():
        pytest.skip(f"{BIN} missing: run `make build`")
    if not nginx_binary() or not shutil.which("wrk"):
        pytest.skip("nginx or wrk missing: make apt")
    a = argparse.Namespace(bin=BIN, max_in_flight=0, max_charge_share_f=None, gatekeeper_args="")
    b = Bench(a, tmp_path)
    r = measure_throughput(b, rounds=1, duration_s=1.0, connections=2, threads=1)
    assert set(r["paths"]) == {"direct", "gatekeeper", "nginx"}
    assert all(p["requests_per_s"] > 100 for p in r["paths"].values())
    assert r["added_median_us"]["gatekeeper"] > 0
