"""Analysis on synthetic logs whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import requests_frame
from hypothesis import given, settings
from hypothesis import strategies as st

from shortfirst_lab.analysis import metrics as analysis


def _df(sizes, rts, **kw):
    return analysis.with_response_times(requests_frame(sizes, rts, **kw))


def test_read_requests_roundtrip(tmp_path):
    p = tmp_path / "requests.csv"
    requests_frame([100, 200], [0.5, 0.25]).to_csv(p, index=False)
    df = analysis.read_requests(p)
    assert df["response_s"].tolist() == pytest.approx([0.5, 0.25])


def test_read_requests_missing_column_names_file_and_columns(tmp_path):
    p = tmp_path / "requests.csv"
    requests_frame([100], [0.5]).drop(columns=["done_s"]).to_csv(p, index=False)
    with pytest.raises(analysis.LogError, match=r"requests\.csv: missing columns \['done_s'\]"):
        analysis.read_requests(p)


def test_read_requests_bad_number_names_line_and_column(tmp_path):
    p = tmp_path / "requests.csv"
    df = requests_frame([100, 200, 300], [0.1, 0.2, 0.3]).astype({"start_s": object})
    df.loc[1, "start_s"] = "soon"
    df.to_csv(p, index=False)
    with pytest.raises(analysis.LogError, match=r"line 3: column start_s: expected a number, got 'soon'"):
        analysis.read_requests(p)


def test_run_metrics_known_answers():
    # 10 warm-up requests (scheduled 0..9) that must be ignored, then 100 with RT = 1..100 ms.
    warm = _df([10] * 10, [9.0] * 10, scheduled_s=np.arange(10) * 0.1)
    rts = np.arange(1, 101) / 1000.0
    sizes = np.arange(1, 101) * 1000
    main = _df(sizes, rts, scheduled_s=10 + np.arange(100) * 0.5, ids=np.arange(10, 110))
    failed = _df([5000], [np.nan], scheduled_s=[20.25], ids=[999])
    df = pd.concat([warm, main, failed], ignore_index=True)
    m = analysis.run_metrics(df, warmup_s=10.0, duration_s=60.0, baseline=None)
    assert m["requests"] == 101
    assert m["completed"] == 100
    assert m["failed"] == 1
    assert m["mean_response_s"] == pytest.approx(0.0505)
    assert m["p50_response_s"] == pytest.approx(np.percentile(rts, 50))
    assert m["p90_response_s"] == pytest.approx(np.percentile(rts, 90))
    assert m["p99_response_s"] == pytest.approx(np.percentile(rts, 99))
    # Largest 1%: ceil(100/100) = 1 request, the 100 KB one with RT 100 ms; also the largest file.
    assert m["largest_1pct_mean_response_s"] == pytest.approx(0.1)
    assert m["largest_file_size_bytes"] == 100_000
    assert m["largest_file_mean_response_s"] == pytest.approx(0.1)
    # Throughput over [10, last scheduled = 59.5]: main request i (0-based) transfers from
    # first byte 10 + 0.5i + 0.0002 to done 10 + 0.5i + (i+1) ms; only the last (i = 99) ends
    # after 59.5, with (59.5 − 59.5002)/… < 0 → none of it inside. Warm-up requests end < 10.
    assert m["window_s"] == [10.0, 59.5]
    assert m["throughput_bytes_per_s"] == pytest.approx(sum(range(1, 100)) * 1000 / 49.5)
    assert m["mean_slowdown"] is None


def test_slowdown_with_known_baseline():
    base = analysis.Baseline(a_s=0.001, rate_eff_bits_per_s=8_000_000)
    sizes = np.array([1000, 10_000, 100_000])
    alone = base.predict(sizes)  # 2 ms, 11 ms, 101 ms
    assert alone == pytest.approx([0.002, 0.011, 0.101])
    df = _df(sizes, alone * np.array([2.0, 4.0, 6.0]))
    m = analysis.run_metrics(df, 0.0, 10.0, base)
    assert m["mean_slowdown"] == pytest.approx(4.0)
    assert m["p50_slowdown"] == pytest.approx(4.0)


def test_fit_baseline_recovers_line_from_medians():
    sizes = np.repeat([100, 1000, 10_000, 100_000, 1_000_000], 5)
    rt = 0.0015 + 8 * sizes / 9_000_000
    noisy = rt.copy()
    noisy[::5] *= 3.0  # one outlier per size: medians ignore it
    b = analysis.fit_baseline(sizes, noisy)
    assert b.a_s == pytest.approx(0.0015, rel=1e-6)
    assert b.rate_eff_bits_per_s == pytest.approx(9_000_000, rel=1e-6)
    assert b.samples == [5] * 5
    assert np.abs(b.residuals()).max() < 1e-6


def test_fit_baseline_needs_two_sizes_and_positive_slope():
    with pytest.raises(ValueError, match="two distinct sizes"):
        analysis.fit_baseline([100, 100], [0.1, 0.1])
    with pytest.raises(ValueError, match="non-positive slope"):
        analysis.fit_baseline([100, 1000], [0.2, 0.1])


def test_percentile_buckets_exact():
    sizes = np.arange(400)  # distinct, so bucket k holds sizes 2k and 2k+1
    rts = sizes.astype(float)
    t = analysis.percentile_buckets(_df(sizes + 1, rts))
    assert len(t) == 200
    assert (t["count"] == 2).all()
    assert t["pct_hi"].iloc[0] == pytest.approx(0.5)
    assert t["pct_hi"].iloc[-1] == pytest.approx(100.0)
    assert t["mean_response_s"].tolist() == pytest.approx([2 * k + 0.5 for k in range(200)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10**7), min_size=1, max_size=1500))
def test_percentile_buckets_properties(sizes):
    n = len(sizes)
    t = analysis.percentile_buckets(_df(sizes, np.ones(n)))
    assert t["count"].sum() == n
    assert len(t) == min(n, 200)
    # Equal counts ±1, and buckets are ordered by size.
    assert t["count"].max() - t["count"].min() <= 1
    assert (t["size_hi"].to_numpy()[:-1] <= t["size_lo"].to_numpy()[1:]).all()


def test_size_bins_exact():
    t = analysis.size_bins(_df([100, 119, 120, 143, 144, 1000], [1, 3, 5, 7, 9, 11]))
    rows = {int(b): (c, m) for b, c, m in zip(t["bin"], t["count"], t["mean_response_s"], strict=True)}
    assert rows[0] == (2, 2.0)  # [100, 120)
    assert rows[1] == (2, 6.0)  # [120, 144)
    assert rows[2] == (1, 9.0)  # [144, 172.8)
    k = math.floor(math.log(10) / math.log(1.2))  # 1000 / 100 = 1.2^12.6
    assert rows[k] == (1, 11.0)
    assert t["size_lo"].iloc[0] == pytest.approx(100)
    assert t["size_hi"].iloc[0] == pytest.approx(120)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10**7), min_size=1, max_size=500))
def test_size_bins_properties(sizes):
    df = _df(sizes, np.ones(len(sizes)))
    t = analysis.size_bins(df)
    assert t["count"].sum() == len(sizes)
    assert (t["size_hi"] / t["size_lo"]).to_numpy() == pytest.approx(1.2)
    s = np.asarray(sizes, dtype=float)
    lo = s.min()
    for b, lo_edge, hi_edge in zip(t["bin"], t["size_lo"], t["size_hi"], strict=True):
        members = s[np.floor(np.log(s / lo) / np.log(1.2) + 1e-9) == b]
        assert (members >= lo_edge * (1 - 1e-9)).all() and (members < hi_edge * (1 + 1e-9)).all()


def test_stretch_known():
    fair = _df([1, 2, 3, 4], [1.0, 2.0, 4.0, 8.0])
    pol = _df([1, 2, 3, 4], [0.5, 1.0, 6.0, 8.0])  # S = 0.5, 0.5, 1.5, 1.0
    s = analysis.stretch(pol, fair)
    assert s["matched"] == 4
    assert s["fraction_starved"] == pytest.approx(0.25)
    assert s["max_stretch"] == pytest.approx(1.5)


def test_stretch_matches_by_id_and_skips_failures():
    fair = _df([1, 2, 3], [1.0, np.nan, 2.0], ids=[10, 11, 12])
    pol = _df([3, 1, 2], [4.0, 0.5, 1.0], ids=[12, 10, 11])
    s = analysis.stretch(pol, fair)
    assert s["matched"] == 2
    assert s["max_stretch"] == pytest.approx(2.0)
    assert s["fraction_starved"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("fair_rt", "pol_rt", "delta", "slowed", "max_resolved"),
    [
        # A 0.2 ms response 0.3 ms slower: S = 2.5, but within δ = 1 ms.
        ([0.0002, 1.0], [0.0005, 0.5], 0.001, 0.0, 0.5 / 1.001),
        # 2 ms more on a 1 ms response is beyond δ: 3 ms / (1 ms + 1 ms).
        ([0.001, 1.0], [0.003, 0.5], 0.001, 0.5, 1.5),
        # Exactly δ slower is not beyond it (binary fractions: no rounding).
        ([0.5, 1.0], [0.5 + 2**-10, 1.0], 2**-10, 0.0, 1.0),
        # δ = 0 is plain S > 1 and max S.
        ([1.0, 2.0], [1.5, 1.0], 0.0, 0.5, 1.5),
    ],
)  # fmt: skip
def test_stretch_beyond_the_resolution_table(fair_rt, pol_rt, delta, slowed, max_resolved):
    n = len(fair_rt)
    s = analysis.stretch(_df(np.ones(n), pol_rt), _df(np.ones(n), fair_rt), delta)
    assert s["stretch_resolution_s"] == delta
    assert s["fraction_starved_resolved"] == pytest.approx(slowed)
    assert s["max_stretch_resolved"] == pytest.approx(max_resolved)
    assert "fraction_starved_resolved" not in analysis.stretch(
        _df(np.ones(n), pol_rt), _df(np.ones(n), fair_rt)
    )


@pytest.mark.parametrize(
    ("rate", "mtu", "want"),
    [
        (10_000_000, 1500, 0.0012),
        (100_000_000, 1500, 0.001),
        (10_000_000, 576, 0.001),
        (1_000_000, 1500, 0.012),
    ],
)
def test_stretch_resolution_is_a_segment_on_the_link_at_least_1ms(rate, mtu, want):
    assert analysis.stretch_resolution_s(rate, mtu) == pytest.approx(want)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-4, max_value=100), min_size=1, max_size=200),
    st.floats(0.0, 0.01),
    st.floats(0.1, 10),
)
def test_stretch_resolved_never_counts_more_than_plain_stretch(rts, delta, k):
    fair = _df(np.ones(len(rts)), rts)
    s = analysis.stretch(_df(np.ones(len(rts)), np.asarray(rts) * k), fair, delta)
    assert s["fraction_starved_resolved"] <= s["fraction_starved"]
    assert s["max_stretch_resolved"] <= s["max_stretch"] * (1 + 1e-12)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-4, max_value=100), min_size=1, max_size=200),
    st.one_of(st.floats(0.1, 0.99), st.floats(1.01, 10)),
)
def test_stretch_scaling_property(rts, k):
    fair = _df(np.ones(len(rts)), rts)
    pol = _df(np.ones(len(rts)), np.asarray(rts) * k)
    s = analysis.stretch(pol, fair)
    assert s["max_stretch"] == pytest.approx(k)
    assert s["fraction_starved"] == (1.0 if k > 1 else 0.0)


def test_compare_ratios_direction():
    fair = {
        "mean_response_s": 1.0,
        "mean_slowdown": 40.0,
        "throughput_bytes_per_s": 1000.0,
        "largest_1pct_mean_response_s": 2.0,
    }
    srpt = {
        "policy": "srpt",
        "load": 0.8,
        "repeat": 1,
        "mean_response_s": 0.25,
        "mean_slowdown": 4.0,
        "throughput_bytes_per_s": 990.0,
        "largest_1pct_mean_response_s": 2.2,
    }
    c = analysis.compare(srpt, fair, {"fraction_starved": 0.01, "max_stretch": 1.3})
    assert c["mean_response_ratio"] == pytest.approx(4.0)
    assert c["mean_slowdown_ratio"] == pytest.approx(10.0)
    assert c["throughput_ratio"] == pytest.approx(0.99)
    assert c["largest_1pct_ratio"] == pytest.approx(1.1)
    assert c["baseline"] == "fair"


def test_batch_means_ci():
    assert analysis.batch_means_ci(np.ones(100)) == pytest.approx(0.0)
    assert analysis.batch_means_ci(np.ones(5)) is None
    v = np.repeat(np.arange(10.0), 10)  # batch means 0..9, sd = 3.0277
    expected = 2.2621571627 * np.std(np.arange(10.0), ddof=1) / math.sqrt(10)
    assert analysis.batch_means_ci(v) == pytest.approx(expected, rel=1e-6)


def test_ccdf():
    x, p = analysis.ccdf([3.0, 1.0, 2.0, np.nan])
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert p.tolist() == pytest.approx([2 / 3, 1 / 3, 0.0])


def test_health_summary():
    h = pd.DataFrame(
        {
            "t_s": [0.0, 1.0, 2.0, 3.0],
            "open_connections": [1, 5, 3, 7],
            "listen_overflows": [10, 10, 12, 15],
            "listen_drops": [0, 0, 1, 1],
            "server_cpu_s": [1.0, 1.1, 1.2, 1.3],
        }
    )
    s = analysis.health_summary(h)
    assert s["open_connections_mean"] == pytest.approx(4.0)
    assert s["open_connections_max"] == 7
    assert s["listen_overflows"] == 5
    assert s["listen_drops"] == 1
    assert s["server_cpu_fraction"] == pytest.approx(0.1)
    assert analysis.health_summary(pd.DataFrame()) == {}


@pytest.mark.parametrize(
    ("columns", "lo_s", "hi_s", "expected"),
    [
        # two bands, 1,000 + 250 bytes a second between t = 1 and t = 3
        ({"band_bytes.1": [0, 1000, 2000, 3000], "band_bytes.2": [0, 250, 500, 750]}, 1.0, 3.0, 10_000.0),
        # the window picks its samples; the warm-up's bytes are not counted
        ({"band_bytes.1": [0, 5000, 6000, 7000]}, 1.0, 3.0, 8_000.0),
        # a band first seen inside the window counts from zero
        ({"band_bytes.1": [0, 1000, 2000, 3000], "band_bytes.2": [None, None, 100, 100]}, 1.0, 3.0, 8_400.0),
        # fewer than two samples inside the window, or no qdisc counters: unknown
        ({"band_bytes.1": [0, 1000, 2000, 3000]}, 2.5, 3.0, None),
        ({"open_connections": [1, 1, 1, 1]}, 0.0, 3.0, None),
    ],
)
def test_link_bits_per_s(columns, lo_s, hi_s, expected):
    h = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], **columns})
    got = analysis.link_bits_per_s(h, lo_s, hi_s)
    assert got == (pytest.approx(expected) if expected is not None else None)
    assert analysis.link_bits_per_s(pd.DataFrame(), 0.0, 1.0) is None


def test_largest_fraction_tie_break_by_id():
    df = _df([5, 5, 5, 1] * 50, np.ones(200))
    top = analysis.largest_fraction(df, 0.01)
    assert top["id"].tolist() == [0, 1]


def test_baseline_interpolates_ladder_medians_log_log():
    # A link whose small transfers are faster than the line (HTB burst): the ladder is used.
    b = analysis.Baseline(
        a_s=0.0,
        rate_eff_bits_per_s=8_000_000,
        sizes_bytes=[100, 10_000, 1_000_000],
        median_s=[0.001, 0.004, 1.0],
    )
    assert b.predict([100, 10_000, 1_000_000]) == pytest.approx([0.001, 0.004, 1.0])
    assert b.predict([1000])[0] == pytest.approx(0.002)  # geometric midpoint in log-log
    assert b.predict([10])[0] == pytest.approx(0.001)  # below the ladder: the smallest's
    assert b.predict([2_000_000])[0] == pytest.approx(1.0 + 1.0)  # above: + 8·1e6 B / 8 Mbit/s
    assert b.line([1_000_000])[0] == pytest.approx(1.0)
    # Medians are made non-decreasing before interpolating.
    b2 = analysis.Baseline(0.0, 8e6, sizes_bytes=[100, 1000, 10_000], median_s=[0.002, 0.001, 0.004])
    assert b2.predict([1000])[0] == pytest.approx(0.002)


def test_bytes_in_window_spreads_transfers():
    # One 1000-byte transfer from t=1 to t=3 (first byte at 1), one instantaneous at t=5.
    df = requests_frame([1000, 400], [2.0, 0.0], scheduled_s=[1.0, 5.0])
    df["first_byte_s"] = [1.0, 5.0]
    assert analysis.bytes_in_window(df, 0.0, 10.0) == pytest.approx(1400)
    assert analysis.bytes_in_window(df, 2.0, 10.0) == pytest.approx(500 + 400)
    assert analysis.bytes_in_window(df, 1.5, 2.0) == pytest.approx(250)
    assert analysis.bytes_in_window(df, 4.0, 4.9) == pytest.approx(0)
