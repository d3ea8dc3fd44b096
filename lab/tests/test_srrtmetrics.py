"""srrt's estimate-ratio histogram read from a hand-written server metrics text."""

from __future__ import annotations

import math

import pytest
from conftest import SRRT_METRICS_TEXT

from shortfirst_lab.analysis import srrtmetrics

BOUNDS = ("0.125", "0.25", "0.5", "0.8", "1", "1.25", "2", "4", "8", "+Inf")


def _text(counts: list[int]) -> str:
    """A histogram as the server renders it, from per-bucket (non-cumulative) counts."""
    lines, cum = [], 0
    for le, n in zip(BOUNDS, counts, strict=True):
        cum += n
        lines.append(f'shortfirst_srrt_estimate_ratio_bucket{{le="{le}"}} {cum}')
    return "\n".join(lines) + f"\nshortfirst_srrt_estimate_ratio_count {cum}\n"


def test_accuracy_of_the_hand_written_text():
    a = srrtmetrics.accuracy(SRRT_METRICS_TEXT)
    assert a["responses"] == 20
    assert a["band_changes"] == {"start": 7, "drain": 3, "tcp_state": 1}
    assert (a["demotions_held"], a["tcp_info_reads"], a["tcp_info_errors"]) == (2, 30, 0)
    assert a["tcp_info_reads_per_response"] == pytest.approx(1.5)
    assert (a["mean_estimated_s"], a["mean_measured_s"], a["ratio_of_sums"]) == (
        pytest.approx(0.45),
        pytest.approx(0.5),
        pytest.approx(0.9),
    )
    # Per bucket: 1, 0, 1, 2, 10, 4, 1, 0, 0, 1 (above 8).
    assert a["fraction_underestimated"] == pytest.approx(14 / 20)
    assert a["within_factor_1.25"] == pytest.approx((18 - 4) / 20)
    assert a["within_factor_2"] == pytest.approx((19 - 2) / 20)
    assert a["within_factor_4"] == pytest.approx((19 - 1) / 20)
    assert a["within_factor_8"] == pytest.approx((19 - 1) / 20)
    # Median: the 10th of 20 lies 6/10 of the way through (0.8, 1], in log(ratio).
    assert a["p50_ratio"] == pytest.approx(0.8 * 1.25**0.6)
    assert a["p50_ratio_bounds"] == [0.8, 1.0]
    assert a["p90_ratio"] == pytest.approx(1.25) and a["p90_ratio_bounds"] == [1.0, 1.25]
    # Error factor max(r, 1/r): 0 at 1, 14 within 1.25, 17 within 2, 18 within 4 and 8.
    assert a["p50_error_factor"] == pytest.approx(1.25 ** (10 / 14))
    assert a["p50_error_factor_bounds"] == [1.0, 1.25]
    assert a["p90_error_factor"] == pytest.approx(4.0) and a["p90_error_factor_bounds"] == [2.0, 4.0]
    assert a["ratio_buckets"][-1] == ["+Inf", 20]


def test_quantile_in_the_open_top_bucket_has_no_value():
    a = srrtmetrics.accuracy(_text([0, 0, 0, 0, 1, 0, 0, 0, 0, 9]))
    assert a["p50_ratio"] is None and a["p50_ratio_bounds"] == [8.0, None]
    assert a["p90_error_factor"] is None and a["p90_error_factor_bounds"] == [8.0, None]
    assert a["within_factor_8"] == pytest.approx(0.1)


def test_first_bucket_is_linear_from_zero():
    a = srrtmetrics.accuracy(_text([4, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
    assert a["p50_ratio"] == pytest.approx(0.0625) and a["p50_ratio_bounds"] == [0.0, 0.125]
    assert a["fraction_underestimated"] == 1.0


def test_no_responses_gives_counts_only():
    a = srrtmetrics.accuracy(_text([0] * 10))
    assert a["responses"] == 0 and "p50_ratio" not in a and a["mean_estimated_s"] is None


@pytest.mark.parametrize(
    "text",
    ["", "# metrics scrape timed out\n", 'shortfirst_response_seconds_bucket{band="1",le="0.5"} 3\n'],
)
def test_text_without_the_series_is_none(text):
    assert srrtmetrics.accuracy(text) is None


@pytest.mark.parametrize(
    "text, message",
    [
        (_text([1] * 10).replace('le="2"} 7', 'le="2"} 2'), "decrease"),
        ("\n".join(_text([1] * 10).splitlines()[:-2]) + "\n", r"no \+Inf bucket"),
        ('shortfirst_srrt_estimate_ratio_bucket{le="x"} 1\n', "le is not a number"),
        ("shortfirst_srrt_estimate_ratio_bucket 1\n", "without an le label"),
        ("not a metric line at all {\n", "not a sample"),
        (_text([1] * 10).replace('le="1.25"', 'le="1.3"'), "no bucket at 1.25"),
    ],
)
def test_malformed_text_is_an_error_naming_why(text, message):
    with pytest.raises(srrtmetrics.MetricsError, match=message):
        srrtmetrics.accuracy(text)


def test_run_accuracy_names_the_file(tmp_path):
    assert srrtmetrics.run_accuracy(tmp_path) is None
    (tmp_path / "server_metrics.txt").write_text(_text([1] * 10).replace('le="2"} 7', 'le="2"} 2'))
    with pytest.raises(srrtmetrics.MetricsError, match="server_metrics.txt"):
        srrtmetrics.run_accuracy(tmp_path)
    (tmp_path / "server_metrics.txt").write_text(_text([0, 0, 0, 0, 5, 5, 0, 0, 0, 0]))
    a = srrtmetrics.run_accuracy(tmp_path)
    assert a["within_factor_1.25"] == 1.0 and math.isclose(a["fraction_underestimated"], 0.5)
