"""`shortfirst sim` as users run it: trace in, requests.csv and summary.json out."""

import json
import math
import subprocess
import tempfile

import pandas as pd
import pytest
from sim_fixtures import require_binary

from shortfirst_lab.theory.mg1 import Exponential
from shortfirst_lab.theory.simfigs import mean_ci, replicate, run_sim

COLUMNS = (
    "id,client,path,size_bytes,bytes_received,status,outcome,attempts,"
    "scheduled_s,start_s,connected_s,first_byte_s,done_s"
)


@pytest.fixture(scope="module")
def binary():
    return require_binary()


def write_trace(path, rows):
    path.write_text("time_s,path,size_bytes,client\n" + "".join(f"{t},{p},{s},{c}\n" for t, p, s, c in rows))
    return path


# 10 Mbit/s = 1.25 MB/s: 12,500 bytes take 10 ms. Rows deliberately out of time order.
# a: 10 ms at 0; b: 4 ms at 5 ms; c: 2 ms at 6 ms.
TRACE = [
    (100.006, "/c", 2_500, 3),
    (100.000, "/a", 12_500, 1),
    (100.005, "/b", 5_000, 2),
]
ARRIVALS = [0.0, 0.005, 0.006]


@pytest.mark.parametrize(
    "policy,done",
    [
        # a 0-10, b 10-14, c 14-16.
        ("fifo", [0.010, 0.014, 0.016]),
        # b preempts a at 5 (5 left vs 4); c preempts b at 6 (3 left vs 2): c 6-8, b 8-11, a 11-16.
        ("srpt", [0.016, 0.011, 0.008]),
        # 0-5 a alone (5 left); 5-6 a, b at 1/2 (4.5, 3.5); thirds: c done at 12 (a 2.5, b 1.5);
        # halves: b done at 15; a at 16.
        ("ps", [0.016, 0.015, 0.012]),
    ],
)
def test_trace_replay_hand_checked(binary, tmp_path, policy, done):
    trace = write_trace(tmp_path / "t.csv", TRACE)
    s = run_sim(tmp_path / "out", policy=policy, rate="10mbit", trace=trace, binary=binary)
    text = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    assert text[0] == COLUMNS
    df = pd.read_csv(tmp_path / "out" / "requests.csv")
    assert list(df["path"]) == ["/a", "/b", "/c"], "rows in arrival order, times relative to the first"
    assert list(df["client"]) == [1, 2, 3]
    assert list(df["scheduled_s"]) == pytest.approx(ARRIVALS, abs=1e-6)
    assert list(df["done_s"]) == pytest.approx(done, abs=2e-6)
    assert (df["outcome"] == "ok").all() and (df["status"] == 200).all() and (df["attempts"] == 1).all()
    assert (df["bytes_received"] == df["size_bytes"]).all()
    assert s["requests"] == 3 and s["policy"] == policy and s["rate_bits_per_s"] == 10e6
    want_mean = sum(d - a for d, a in zip(done, ARRIVALS, strict=True)) / 3
    assert s["mean_response_s"] == pytest.approx(want_mean, abs=1e-9)
    assert s["command"][1] == "sim"
    assert not list((tmp_path / "out").glob("*.tmp")), "no temporary files left"


def test_first_byte_is_first_service(binary, tmp_path):
    # fifo: b waits behind a; its first byte is when a finishes.
    trace = write_trace(tmp_path / "t.csv", [(0.0, "/a", 12_500, 0), (0.001, "/b", 125, 0)])
    run_sim(tmp_path / "o", policy="fifo", rate="10mbit", trace=trace, binary=binary)
    df = pd.read_csv(tmp_path / "o" / "requests.csv")
    assert df["first_byte_s"].tolist() == pytest.approx([0.0, 0.010])
    run_sim(tmp_path / "o", policy="srpt", rate="10mbit", trace=trace, binary=binary)
    df = pd.read_csv(tmp_path / "o" / "requests.csv")
    assert df["first_byte_s"].tolist() == pytest.approx([0.0, 0.001])


def test_load_scaling_and_servers(binary, tmp_path):
    rows = [(i * 1.0, f"/f{i}", 1_000 * (1 + i % 7), 0) for i in range(200)]
    trace = write_trace(tmp_path / "t.csv", rows)
    s = run_sim(tmp_path / "o", policy="srpt", rate="1mbit", trace=trace, load=0.6, servers=2, binary=binary)
    assert s["offered_load"] == pytest.approx(0.6, rel=1e-9)
    assert s["servers"] == 2


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--policy", "lifo"], "unknown policy"),
        (["--policy", "srpt-classes:5K,1K"], "strictly increasing"),
        (["--link-rate", "10mbps"], "bits"),
        (["--policy", "sjf-aging:2", "--servers", "2"], "one server"),
    ],
)
def test_bad_arguments_are_explained(binary, tmp_path, args, needle):
    trace = write_trace(tmp_path / "t.csv", TRACE)
    base = {"--policy": "srpt", "--link-rate": "10mbit"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    cmd = [str(binary), "sim", "--trace", str(trace), "--out", str(tmp_path / "o")]
    for k, v in base.items():
        cmd += [k, v]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr
    assert not (tmp_path / "o" / "summary.json").exists()


def test_malformed_trace_names_the_line(binary, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,path,size_bytes\n0,/a,10\n1,/b,ten\n")
    p = subprocess.run(
        [
            str(binary),
            "sim",
            "--trace",
            str(bad),
            "--policy",
            "ps",
            "--link-rate",
            "1mbit",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "line 3" in p.stderr, p.stderr


def erlang_c_response(lam, mu, c):
    """M/M/c FIFO mean response time (Erlang C)."""
    a = lam / mu
    rho = a / c
    s = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (s + top)
    return 1 / mu + p_wait / (c * mu - lam)


@pytest.mark.slow
def test_two_servers_fifo_is_erlang_c(binary):
    """Multi-server semantics: `--servers 2` FIFO with exponential sizes is M/M/2."""
    d = Exponential(10_000.0)
    rate = 8e6  # per server: 1e6 bytes/s, mu = 100 jobs/s
    mu = rate / 8 / d.mean
    lam = 2 * 0.8 * mu
    runs = [replicate_servers(binary, d, lam, seed=900 + r) for r in range(10)]
    ci = mean_ci([r["mean_response_s"] for r in runs], [[r["mean_size_bytes"]] for r in runs], [d.mean])
    want = erlang_c_response(lam, mu, 2)
    assert ci.relative_half_width < 0.03
    assert ci.contains(want), (want, ci)


def replicate_servers(binary, d, lam, seed):
    with tempfile.TemporaryDirectory() as tmp:
        return run_sim(
            tmp,
            policy="fifo",
            rate="8mbit",
            workload=f"exp:{d.m!r}",
            jobs=100_000,
            arrival_rate=lam,
            seed=seed,
            servers=2,
            warmup_jobs=5_000,
            summary_only=True,
            binary=binary,
        )


def test_summary_only_writes_no_requests(binary, tmp_path):
    s = run_sim(
        tmp_path, policy="las", rate="10mbit", workload="exp:1000", jobs=1000, load=0.5, summary_only=True
    )
    assert s["requests"] == 1000 and s["offered_load"] == pytest.approx(0.5)
    assert not (tmp_path / "requests.csv").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["seed"] == 1


def test_replicate_uses_distinct_seeds(binary):
    runs = replicate(Exponential(1000.0), 0.5, "ps", jobs=2000, replications=3)
    assert len({r["mean_response_s"] for r in runs}) == 3
