"""Responses in transfer at once (`shortfirst_lab.analysis.inflight`): exact time weights, the window,
the size threshold and the tail, and the command's errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shortfirst_lab.__main__ import main as lab_main
from shortfirst_lab.analysis import inflight
from shortfirst_lab.analysis.metrics import REQUEST_COLUMNS


@pytest.mark.parametrize(
    ("intervals", "window", "limit", "expected"),
    [
        # one interval over half the window
        (
            [(0, 5)],
            (0, 10),
            1,
            {"mean": 0.5, "median": 0.0, "p90": 1.0, "max": 1.0, "fraction_at_limit": 0.5},
        ),
        # two overlapping: 0-2 one, 2-4 two, 4-6 one, 6-10 none (quantile: least count reaching it)
        (
            [(0, 4), (2, 6)],
            (0, 10),
            2,
            {"mean": 0.8, "median": 1.0, "p90": 2.0, "max": 2.0, "fraction_at_limit": 0.2},
        ),
        # intervals clipped to the window; one wholly outside counts nothing
        (
            [(-5, 5), (20, 30)],
            (0, 10),
            1,
            {"mean": 0.5, "median": 0.0, "p90": 1.0, "max": 1.0, "fraction_at_limit": 0.5},
        ),
        # back to back: an end and a start at the same time never count as two
        (
            [(0, 5), (5, 10)],
            (0, 10),
            2,
            {"mean": 1.0, "median": 1.0, "p90": 1.0, "max": 1.0, "fraction_at_limit": 0.0},
        ),
        # nothing in transfer
        ([], (0, 10), 1, {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0, "fraction_at_limit": 0.0}),
    ],
)
def test_time_weighted_counts(intervals, window, limit, expected):
    s = np.array([a for a, _ in intervals], dtype=float)
    e = np.array([b for _, b in intervals], dtype=float)
    assert inflight.time_weighted(s, e, *window, limit) == pytest.approx(expected)


def test_empty_window_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        inflight.time_weighted(np.array([0.0]), np.array([1.0]), 5, 5, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.floats(0, 20)), max_size=30), st.integers(1, 5))
def test_time_weighted_matches_dense_sampling(pairs, limit):
    s = np.array([min(a, b) for a, b in pairs], dtype=float)
    e = np.array([max(a, b) for a, b in pairs], dtype=float)
    got = inflight.time_weighted(s, e, 2.0, 18.0, limit)
    t = np.linspace(2.0, 18.0, 16001)[:-1] + 0.0005  # midpoints of 1 ms steps
    n = ((s[:, None] <= t) & (t < e[:, None])).sum(axis=0) if len(s) else np.zeros_like(t)
    assert got["mean"] == pytest.approx(n.mean(), abs=0.01 * max(1, len(s)))
    assert got["fraction_at_limit"] == pytest.approx((n >= limit).mean(), abs=0.01 * max(1, len(s)))
    assert got["max"] >= np.max(n, initial=0)  # sampling can only miss a short peak
    assert 0.0 <= got["fraction_at_limit"] <= 1.0


def _requests(rows):
    df = pd.DataFrame(rows, columns=["id", "size_bytes", "outcome", "scheduled_s", "first_byte_s", "done_s"])
    for c in REQUEST_COLUMNS:
        if c not in df:
            df[c] = {
                "client": 0,
                "path": "/f",
                "bytes_received": df["size_bytes"],
                "status": 200,
                "attempts": 1,
            }.get(c, 0.0)
    return df[list(REQUEST_COLUMNS)]


def test_run_counts_long_responses_only_and_takes_the_tail_off(tmp_path, capsys):
    rows = [
        (0, 1_000, "ok", 1.0, 1.0, 2.0),  # short: never counted
        (1, 100_000, "ok", 1.0, 1.0, 6.0),  # long: in transfer 1-5 with a 1 s tail
        (2, 200_000, "ok", 0.5, 0.5, 3.0),  # scheduled before the window, still counted 0.5-2
        (3, 150_000, "timeout", 1.0, 1.0, np.nan),  # failed: not counted
    ]
    run = tmp_path / "exp" / "runs" / "r1"
    run.mkdir(parents=True)
    _requests(rows).to_csv(run / "requests.csv", index=False)
    (tmp_path / "exp" / "experiment.toml").write_text("[run]\nwarmup_s = 1.0\nduration_s = 9.0\n")
    assert inflight.main([str(run), "--tail-s", "1", "--min-bytes", "50000", "--limit", "2"]) == 0
    r = json.loads(capsys.readouterr().out)["r1"]
    assert r["window_s"] == [1.0, 9.0]
    assert r["long_responses"] == 2
    # 1-2: two, 2-5: one, 5-9: none, over 8 s
    assert r["in_transfer"]["mean"] == pytest.approx((2 * 1 + 1 * 3) / 8)
    assert r["in_transfer"]["fraction_at_limit"] == pytest.approx(1 / 8)
    # window-scheduled completed bytes: 1,000 short of 101,000
    assert r["short_bytes_share"] == pytest.approx(1_000 / 101_000)
    assert r["per_flow_kbit_s"]["30000-100000"]["count"] == 1
    assert r["per_flow_kbit_s"]["30000-100000"]["median"] == pytest.approx(100_000 * 8 / 5 / 1e3)


def test_errors_name_the_file(tmp_path, capsys):
    run = tmp_path / "exp" / "runs" / "r1"
    run.mkdir(parents=True)
    _requests([(0, 1_000, "ok", 1.0, 1.0, 2.0)]).to_csv(run / "requests.csv", index=False)
    assert lab_main(["inflight", str(run)]) == 2
    assert "experiment.toml" in capsys.readouterr().err
    assert lab_main(["inflight", str(run), "--from-s", "5", "--to-s", "9"]) == 2
    assert "no completed request" in capsys.readouterr().err


def test_half_a_window_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit):
        inflight.main([str(tmp_path), "--from-s", "5"])
