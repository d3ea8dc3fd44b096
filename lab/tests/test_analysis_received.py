"""Throughput from the generator's received.csv (body bytes per bucket), and the spread
estimate kept for runs without it."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import requests_frame, write_run_dir
from sim_fixtures import loopback_server, require_binary

from shortfirst_lab import commands
from shortfirst_lab.analysis import metrics as analysis
from shortfirst_lab.analysis import overload, report

BUCKET_S = 0.1


def _received_csv(path, total_s: float, bytes_at: dict[int, int]) -> None:
    """A dense received.csv of 100 ms buckets over [0, total_s), `bytes_at` by bucket index."""
    n = round(total_s / BUCKET_S)
    b = np.zeros(n, dtype=int)
    for i, v in bytes_at.items():
        b[i] = v
    pd.DataFrame({"t_s": np.round(np.arange(n) * BUCKET_S, 3), "bytes": b}).to_csv(path, index=False)


def _held_back_run(rdir):
    """One 1 MB response from first byte 5 s to done 30 s whose bytes all arrive in its last
    second (100 KB per bucket from 29.0 s), and a small request scheduled at 35 s so the
    window can end at 29.5 s."""
    df = requests_frame([1_000_000, 1000], [25.0, 0.05], scheduled_s=[5.0, 35.0])
    df["first_byte_s"] = [5.0, 35.0]
    write_run_dir(rdir, df)
    _received_csv(rdir / "received.csv", 36.0, {**{290 + k: 100_000 for k in range(10)}, 350: 1000})
    return rdir


def test_a_held_back_response_counts_where_it_arrived_not_spread(tmp_path):
    rdir = _held_back_run(tmp_path / "run")
    df = analysis.read_requests(rdir / "requests.csv")
    received = analysis.read_received(rdir / "received.csv")
    assert received is not None and received.bucket_s == pytest.approx(BUCKET_S)
    m = analysis.run_metrics(df, 10.0, 29.5, None, received)
    assert m["throughput_method"] == "received"
    assert m["window_s"] == [10.0, 29.5]
    # Buckets 29.0 … 29.4 are inside: 500 KB over 19.5 s.
    assert m["throughput_bytes_per_s"] == pytest.approx(500_000 / 19.5)
    # Spread over 5 s → 30 s, the same response would put 19.5/25 of its bytes inside.
    spread = analysis.run_metrics(df, 10.0, 29.5, None)
    assert spread["throughput_method"] == "spread"
    assert spread["throughput_bytes_per_s"] == pytest.approx(1_000_000 * 19.5 / 25 / 19.5)
    # A window that ends before the bytes arrived counts none of them.
    early = analysis.run_metrics(df, 10.0, 28.9, None, received)
    assert early["throughput_bytes_per_s"] == 0.0


def test_without_received_csv_the_spread_estimate_is_kept(tmp_path):
    rdir = _held_back_run(tmp_path / "run")
    (rdir / "received.csv").unlink()
    assert analysis.read_received(rdir / "received.csv") is None
    df = analysis.read_requests(rdir / "requests.csv")
    m = analysis.run_metrics(df, 10.0, 29.5, None, analysis.read_received(rdir / "received.csv"))
    assert m["throughput_method"] == "spread"
    assert m["throughput_bytes_per_s"] == pytest.approx(analysis.bytes_in_window(df, 10.0, 29.5) / 19.5)


@pytest.mark.parametrize(
    ("lo_s", "hi_s", "want"),
    [
        (0.0, 0.3, 600.0),  # all three buckets whole
        (0.05, 0.3, 550.0),  # half of the first
        (0.0, 0.25, 450.0),  # half of the last
        (0.12, 0.14, 40.0),  # a fifth of the middle one
        (0.3, 1.0, 0.0),  # after them
    ],
)
def test_buckets_straddling_an_edge_count_pro_rata(lo_s, hi_s, want):
    r = analysis.Received(np.array([0.0, 0.1, 0.2]), np.array([100.0, 200.0, 300.0]), 0.1)
    assert r.bytes_between(lo_s, hi_s) == pytest.approx(want)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("t_s,bits\n0.0,1\n", r"missing columns \['bytes'\]"),
        ("t_s,bytes\n0.0,1\n0.1,x\n", r"line 3: expected numbers"),
        ("t_s,bytes\n0.0,1\n0.1,2\n0.3,3\n", "not evenly spaced"),
        ("t_s,bytes\n", "no buckets"),
    ],
)
def test_read_received_names_what_is_wrong(tmp_path, text, error):
    p = tmp_path / "received.csv"
    p.write_text(text)
    with pytest.raises(analysis.LogError, match=error):
        analysis.read_received(p)


def test_report_and_overload_use_received_csv_when_the_run_has_it(experiment_dir):
    with_file = experiment_dir / "runs" / "srpt-load0.70-rep1"
    # 1000 bytes per 100 ms bucket over the whole synthetic run: 10 KB/s in any window.
    _received_csv(with_file / "received.csv", 110.0, {i: 1000 for i in range(1100)})
    report.build(experiment_dir, with_figures=False)
    for rdir in sorted((experiment_dir / "runs").iterdir()):
        a = json.loads((rdir / "analysis.json").read_text())
        assert a["throughput_method"] == ("received" if rdir == with_file else "spread"), rdir.name
    a = json.loads((with_file / "analysis.json").read_text())
    assert a["throughput_bytes_per_s"] == pytest.approx(10_000.0)
    df = analysis.read_requests(with_file / "requests.csv")
    m = overload.client_metrics(df, 10.0, 90.0, analysis.read_received(with_file / "received.csv"))
    assert (m["throughput_method"], m["throughput_bytes_per_s"]) == ("received", pytest.approx(10_000.0))


def test_the_generators_received_csv_reads_back_and_sums_to_the_bodies(tmp_path):
    """`shortfirst load` against `shortfirst serve` on loopback: the lab reads its
    received.csv, whose bytes are the bodies of requests.csv, and takes throughput from it."""
    binary = require_binary()
    root = tmp_path / "root"
    root.mkdir()
    for size in (500, 40_000, 300_000):
        (root / f"{size}.bin").write_bytes(b"x" * size)
    sizes = [(500, 40_000, 300_000)[i % 3] for i in range(60)]
    trace = tmp_path / "t.csv"
    trace.write_text(
        "time_s,path,size_bytes\n" + "".join(f"{i / 40:.3f},/{s}.bin,{s}\n" for i, s in enumerate(sizes))
    )
    with loopback_server(binary, root, tmp_path / "serve.log") as url:
        argv = commands.load(binary, url, trace=trace, out=tmp_path / "run", quiet=True, persistent=3)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    df = analysis.read_requests(tmp_path / "run" / "requests.csv")
    received = analysis.read_received(tmp_path / "run" / "received.csv")
    assert received is not None and received.bucket_s == pytest.approx(0.1)
    assert received.bytes.sum() == df["bytes_received"].sum() == sum(sizes)
    assert received.bytes_between(0.0, float(received.t_s[-1]) + 0.1) == pytest.approx(sum(sizes))
    m = analysis.run_metrics(df, 0.0, 10.0, None, received)
    assert m["throughput_method"] == "received"
