"""Per-second client-side series (shortfirst_lab.analysis.series): hand-checked tables, the file and
command-line forms, and properties of the counts on random logs."""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_fixtures import loopback_server, require_binary

from shortfirst_lab import commands
from shortfirst_lab.__main__ import main as lab_main
from shortfirst_lab.analysis import series
from shortfirst_lab.analysis.metrics import REQUEST_COLUMNS, LogError, with_response_times

NAN = math.nan


def frame(rows: list[tuple]) -> pd.DataFrame:
    """Rows (scheduled_s, start_s, first_byte_s, done_s, outcome, attempts) → a
    requests.csv-shaped frame as `analysis.read_requests` returns it."""
    cols = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(6)]
    sched, start, fb, done, outcome, attempts = cols
    n = len(sched)
    df = pd.DataFrame(
        {
            "id": np.arange(n),
            "client": 0,
            "path": "/x",
            "size_bytes": 1000,
            "bytes_received": [1000 if o == "ok" else 0 for o in outcome],
            "status": [200 if o == "ok" else (503 if o == "http_error" else NAN) for o in outcome],
            "outcome": pd.Series(outcome, dtype=object),
            "attempts": pd.Series(attempts, dtype="int64"),
            "scheduled_s": pd.Series(sched, dtype=float),
            "start_s": pd.Series(start, dtype=float),
            "connected_s": pd.Series(start, dtype=float),
            "first_byte_s": pd.Series(fb, dtype=float),
            "done_s": pd.Series(done, dtype=float),
        },
        columns=list(REQUEST_COLUMNS),
    )
    return with_response_times(df)


# (scheduled_s, start_s, first_byte_s, done_s, outcome, attempts)
HAND = [
    (0.1, 0.1, 0.3, 0.5, "ok", 1),  # second 0: response 0.4, first byte 0.2
    (0.5, 0.6, 1.0, 1.6, "ok", 1),  # started in 0, completes in 1: response 1.0, first byte 0.4
    (1.2, 1.2, 1.3, 1.4, "ok", 1),  # second 1: response 0.2, first byte 0.1
    (1.5, 1.5, NAN, 3.5, "timeout", 1),  # incomplete in second 3
    (2.2, 2.2, NAN, NAN, "failed", 0),  # refused at the in-flight limit: never started
    (2.5, 2.5, 2.6, 2.7, "http_error", 1),  # a 503: incomplete in second 2
]


def test_hand_checked_series():
    s = series.per_second(frame(HAND))
    assert list(s.columns) == list(series.SERIES_COLUMNS)
    assert s["second"].tolist() == [0, 1, 2, 3]
    assert s["scheduled"].tolist() == [2, 2, 2, 0]
    assert s["started"].tolist() == [2, 2, 1, 0]
    assert s["completed"].tolist() == [1, 2, 0, 0]
    assert s["incomplete"].tolist() == [0, 0, 2, 1]
    assert s["in_flight"].tolist() == [1, 1, 1, 0]
    np.testing.assert_allclose(s["mean_response_s"], [0.4, 0.6, NAN, NAN])
    np.testing.assert_allclose(s["mean_ttfb_s"], [0.2, 0.25, NAN, NAN])


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        # Nothing at all: no seconds.
        ([], {"second": []}),
        # Quiet seconds between two requests are rows of zeros.
        (
            [(0.5, 0.5, 0.6, 0.7, "ok", 1), (3.2, 3.2, 3.3, 3.4, "ok", 1)],
            {"second": [0, 1, 2, 3], "started": [1, 0, 0, 1], "completed": [1, 0, 0, 1]},
        ),
        # A request in flight across seconds counts in each second's in_flight.
        (
            [(0.0, 0.0, 2.5, 2.9, "ok", 1)],
            {"started": [1, 0, 0], "completed": [0, 0, 1], "in_flight": [1, 1, 0]},
        ),
        # A completion without a first byte time still has a response time.
        (
            [(0.0, 0.1, NAN, 0.6, "ok", 1)],
            {"mean_response_s": [0.5], "mean_ttfb_s": [NAN]},
        ),
        # Exact second boundaries belong to the second they start.
        (
            [(1.0, 1.0, 1.5, 2.0, "ok", 1)],
            {"scheduled": [0, 1, 0], "started": [0, 1, 0], "completed": [0, 0, 1]},
        ),
    ],
)
def test_table(rows, want):
    s = series.per_second(frame(rows))
    for col, values in want.items():
        np.testing.assert_allclose(s[col].to_numpy(dtype=float), np.asarray(values, dtype=float), err_msg=col)


def write_requests(run_dir, rows, phase=False):
    run_dir.mkdir(parents=True, exist_ok=True)
    df = frame(rows).drop(columns=["response_s"])
    if phase:  # a run with --load-schedule: two more columns at the end
        df["phase"] = 0
        df["load_multiplier"] = 1.2
    df.to_csv(run_dir / "requests.csv", index=False)


@pytest.mark.parametrize("phase", [False, True])
def test_command_writes_series_csv_atomically(tmp_path, capsys, phase):
    run = tmp_path / "run"
    write_requests(run, HAND, phase)
    assert series.main([str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "series.csv")
    text = (run / "series.csv").read_text()
    lines = text.splitlines()
    assert lines[0] == ",".join(series.SERIES_COLUMNS)
    assert lines[1] == "0,2,2,1,0,1,0.400000,0.200000"
    assert lines[3] == "2,2,1,0,2,1,,", "no completion: empty means"
    assert sorted(p.name for p in run.iterdir()) == ["requests.csv", "series.csv"], "no temporary file left"
    back = pd.read_csv(run / "series.csv")
    pd.testing.assert_frame_equal(back, series.per_second(frame(HAND)), check_dtype=False, atol=1e-6)
    # --out elsewhere.
    assert series.main([str(run), "--out", str(tmp_path / "s.csv")]) == 0
    assert (tmp_path / "s.csv").read_text() == text


def test_errors_name_the_file(tmp_path, capsys):
    assert lab_main(["series", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nowhere/requests.csv" in err
    run = tmp_path / "far"
    write_requests(run, [(0.0, 0.0, 0.1, 2e7, "ok", 1)])
    with pytest.raises(LogError, match=r"far/requests.csv: a time of 20000000 s is beyond"):
        series.series_of_run(run)
    assert not (run / "series.csv").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "requests.csv").write_text("id,path\n1,/x\n")
    assert lab_main(["series", str(bad)]) == 2
    assert "missing columns" in capsys.readouterr().err


OUTCOMES = st.sampled_from(["ok", "ok", "ok", "http_error", "failed", "aborted", "timeout"])


@st.composite
def request_logs(draw):
    rows = []
    for _ in range(draw(st.integers(0, 60))):
        sched = draw(st.floats(0.0, 30.0))
        sent = draw(st.booleans()) or draw(st.booleans())
        if not sent:
            rows.append((sched, sched + draw(st.floats(0.0, 0.01)), NAN, NAN, "failed", 0))
            continue
        start = sched + draw(st.floats(0.0, 0.5))
        done = start + draw(st.floats(0.0, 20.0))
        fb = start + (done - start) * draw(st.floats(0.0, 1.0)) if draw(st.booleans()) else NAN
        rows.append((sched, start, fb, done, draw(OUTCOMES), draw(st.integers(1, 3))))
    return rows


@given(request_logs())
@settings(max_examples=200, deadline=None)
def test_counts_add_up(rows):
    df = frame(rows)
    s = series.per_second(df)
    ok = df["outcome"].eq("ok")
    sent = df["attempts"] > 0
    assert s["completed"].sum() == ok.sum(), "completed sums to the completed requests"
    assert s["completed"].sum() + s["incomplete"].sum() == len(df)
    assert s["scheduled"].sum() == len(df)
    assert s["started"].sum() == sent.sum()
    assert (s["in_flight"] >= 0).all()
    if len(s):
        assert s["in_flight"].iloc[-1] == 0, "every request sent has ended by the last second"
        assert s["second"].tolist() == list(range(len(s)))
    # Each second's mean lies within its completions' response times; the overall mean
    # weighted by completions is the mean over every completed request.
    rt = (df["done_s"] - df["start_s"])[ok]
    has = s["completed"] > 0
    assert s["mean_response_s"][has].notna().all() and s["mean_response_s"][~has].isna().all()
    if ok.any():
        weighted = (s["mean_response_s"][has] * s["completed"][has]).sum() / s["completed"].sum()
        assert weighted == pytest.approx(rt.mean(), rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_series_of_a_scheduled_load_run(tmp_path):
    """`shortfirst load --load-schedule` against `shortfirst serve` on loopback: the series
    reads the generator's own requests.csv (phase columns included), and the requests
    scheduled per second follow the schedule: 1 s at 1 × 40/s, then 1 s at 3 ×, twice."""
    binary = require_binary()
    root = tmp_path / "root"
    root.mkdir()
    (root / "x.bin").write_bytes(b"x" * 500)
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,path,size_bytes\n" + "".join(f"{i / 40:.3f},/x.bin,500\n" for i in range(400)))
    with loopback_server(binary, root, tmp_path / "serve.log") as url:
        argv = commands.load(binary, url, trace=trace, out=tmp_path / "run", quiet=True)
        argv += ["--request-rate", "40", "--load-schedule", "1s@1,1s@3", "--duration", "4s"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert series.main([str(tmp_path / "run")]) == 0
    s = pd.read_csv(tmp_path / "run" / "series.csv")
    assert list(s.columns) == list(series.SERIES_COLUMNS)
    np.testing.assert_allclose(s["scheduled"].to_numpy()[:4], [40, 120, 40, 120], atol=1)
    log = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert s["completed"].sum() == (log["outcome"] == "ok").sum() == len(log)
    assert s["started"].sum() == len(log)
    assert (s["mean_response_s"].dropna() > 0).all()
