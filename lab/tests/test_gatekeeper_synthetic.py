"""One point of the synthetic bench on the harness's runner: the synthetic upstream started
as a backend, directly and behind the gatekeeper, the load driven through, the figures, the
upstream's work counters and the sampled timeline collected."""

from __future__ import annotations

import argparse

import pytest
from conftest import BIN

from shortfirst_lab.runners.gatekeeper.backends.synthetic import read_mix
from shortfirst_lab.runners.gatekeeper.synthetic.models import write_trace
from shortfirst_lab.runners.gatekeeper.synthetic.overhead import measure_overhead
from shortfirst_lab.runners.gatekeeper.synthetic.points import Bench


@pytest.mark.slow
@pytest.mark.parametrize("config", ["direct", "sjf"])
def test_a_point_through_the_runner(config, tmp_path):
    if not BIN.exists():
        pytest.skip(f"{BIN} missing: run `make build`")
    a = argparse.Namespace(
        bin=BIN, scale=0.01, cpus=2, slots=8, thrash=0.1, max_in_flight=8, max_charge_share_f=None,
        gatekeeper_args="", timeout=5.0, seed=1, sample_ms=200, duration=3.0, warmup=0.5,
    )  # fmt: skip
    b = Bench(a, tmp_path)
    with b.upstream():
        mix = read_mix(tmp_path / "mix.csv")
    trace = tmp_path / "trace.csv"
    assert write_trace(trace, mix, 50.0, a.duration, a.seed) > 50
    write_trace(tmp_path / "again.csv", mix, 50.0, a.duration, a.seed)
    assert trace.read_bytes() == (tmp_path / "again.csv").read_bytes()
    s = b.one_run(config, "100ms", "open", trace, config)
    assert s["errors"] == 0 and s["timeouts"] == 0, s
    assert s["work_per_s"] > 0 and s["upstream_work"]["completed"] >= s["requests"]
    assert set(s["per_type"]) <= {p.rsplit("/", 1)[-1] for p, _ in mix}
    assert (s["gatekeeper"] is None) == (config == "direct")
    assert len(s["timeline"]) >= 5 and all("up" in r for r in s["timeline"])
    assert all(("gate" in r) == (config != "direct") for r in s["timeline"][1:])


@pytest.mark.slow
def test_the_overhead_rounds_measure_every_path(tmp_path):
    if not BIN.exists():
        pytest.skip(f"{BIN} missing: run `make build`")
    a = argparse.Namespace(
        bin=BIN, scale=0.01, cpus=2, slots=8, thrash=0.1, max_in_flight=8, max_charge_share_f=None,
        gatekeeper_args="", timeout=5.0, seed=1, max_queue_wait_s=None, overhead_rate=50.0, overhead_rounds=2,
        overhead_duration=1.0, overhead_baseline_bin=str(BIN), overhead_busy_poll_us=200,
        overhead_nginx="auto", halt_poll_ns=None,
    )  # fmt: skip
    r = measure_overhead(Bench(a, tmp_path), "1000ms")
    paths = ["direct", "gatekeeper", "gatekeeper-busy-poll", "gatekeeper-baseline"]
    assert r["paths"][:4] == paths and set(r["paths"][4:]) <= {"nginx"}
    assert set(r["overhead_us"]) == set(r["paths"]) - {"direct"} == set(r["proxy_cpu"])
    assert all(len(v) == 2 for v in r["per_round"].values())
    assert all(c["requests"] > 0 for c in r["proxy_cpu"].values())
