"""Report rebuilt from raw logs alone: summary.json schema, known ratios, a self-contained page."""

from __future__ import annotations

import json
import re

import pytest
from conftest import BASE_A_S, BASE_RATE

from shortfirst_lab.__main__ import main
from shortfirst_lab.analysis import report

RUN_KEYS = {
    "policy", "load", "mean_response_s", "p50_response_s", "p90_response_s", "p99_response_s",
    "mean_slowdown",
    "throughput_bytes_per_s", "completed", "failed", "largest_1pct_mean_response_s",
    "largest_file_mean_response_s", "lateness_p99_ms", "valid",
}  # fmt: skip
CMP_KEYS = {
    "load", "baseline", "policy", "mean_response_ratio", "mean_slowdown_ratio", "throughput_ratio",
    "largest_1pct_ratio", "fraction_starved", "max_stretch",
}  # fmt: skip


def test_summary_schema_and_known_values(experiment_dir):
    s = report.build(experiment_dir, with_figures=False)
    assert set(s) == {"experiment", "provenance", "runs", "comparisons", "targets"}
    assert s["experiment"]["name"] == "synthetic"
    assert s["provenance"]["git_commit"] == "abc"
    assert len(s["runs"]) == 4
    for r in s["runs"]:
        assert RUN_KEYS <= set(r)
        assert set(r) - RUN_KEYS <= {"repeat", "run"}
        assert r["valid"] is True
        assert r["failed"] == 0
        # Response = baseline × factor × (1 + load) exactly, so slowdown is that factor.
        factor = (30.0 if r["policy"] == "fair" else 2.0) * (1 + r["load"])
        assert r["mean_slowdown"] == pytest.approx(factor, rel=1e-6)
    assert len(s["comparisons"]) == 2
    for c in s["comparisons"]:
        assert CMP_KEYS <= set(c)
        assert c["policy"] == "srpt"
        assert c["baseline"] == "fair"
        assert c["mean_response_ratio"] == pytest.approx(15.0)
        assert c["mean_slowdown_ratio"] == pytest.approx(15.0)
        assert c["largest_1pct_ratio"] == pytest.approx(1 / 15)
        assert c["fraction_starved"] == 0.0
        assert c["max_stretch"] == pytest.approx(1 / 15)
    # Targets are named by the paper and section they come from, never by a tracker number.
    assert [(t["load"], t["key"]) for t in s["targets"]] == [
        (0.8, "mean_response_ratio"),
        (0.8, "throughput_ratio"),
        (0.8, "largest_1pct_ratio"),
        (0.9, "mean_slowdown_ratio"),
    ]
    assert all(t["source"].startswith(("Harchol-Balter 2003 §", "Schroeder 2006 §")) for t in s["targets"])
    # Written atomically beside the logs, and equal to what build() returned.
    assert json.loads((experiment_dir / "summary.json").read_text()) == s
    a = json.loads((experiment_dir / "runs" / "srpt-load0.90-rep1" / "analysis.json").read_text())
    assert a["health"]["open_connections_max"] == 11
    assert a["health"]["server_cpu_fraction"] == pytest.approx(0.02)


def test_baseline_fit_from_calibration(experiment_dir):
    base, cal, note = report.load_baseline(experiment_dir)
    assert note is None
    assert base.a_s == pytest.approx(BASE_A_S, rel=1e-6)
    assert base.rate_eff_bits_per_s == pytest.approx(BASE_RATE, rel=1e-6)


def test_report_html_is_self_contained(experiment_dir):
    report.build(experiment_dir)
    page = (experiment_dir / "report.html").read_text()
    imgs = re.findall(r'<img[^>]*src="([^"]*)"', page)
    # response, slowdown, percentile, bins, CCDF, open connections, measured vs models, baseline
    assert len(imgs) == 8
    assert all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(src|href)="(https?:)?//', page)
    for needle in ("abc", "wc98like", "mean_response_ratio", "Targets"):
        assert needle in page


def test_missing_run_is_reported_not_fatal(experiment_dir):
    import shutil

    shutil.rmtree(experiment_dir / "runs" / "fair-load0.90-rep1")
    s = report.build(experiment_dir, with_figures=False)
    assert len(s["runs"]) == 3
    assert [c["load"] for c in s["comparisons"]] == [0.7]
    assert "fair-load0.90-rep1" in (experiment_dir / "report.html").read_text()


def test_invalid_generator_run_marked_invalid(experiment_dir):
    (experiment_dir / "runs" / "srpt-load0.70-rep1" / "summary.json").write_text(
        json.dumps({"lateness_p99_ms": 12.0, "valid": False})
    )
    s = report.build(experiment_dir, with_figures=False)
    bad = [r for r in s["runs"] if not r["valid"]]
    assert [(r["policy"], r["load"], r["lateness_p99_ms"]) for r in bad] == [("srpt", 0.7, 12.0)]


def test_cli_report_rebuilds_from_raw_logs(experiment_dir, capsys):
    assert main(["report", str(experiment_dir)]) == 0
    out = capsys.readouterr().out
    assert "report:" in out and "srpt" in out
    assert (experiment_dir / "report.html").exists()


def test_cli_report_on_non_experiment_dir(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "experiment.toml: missing" in capsys.readouterr().err


def test_cli_report_without_raw_logs_changes_nothing(experiment_dir, capsys):
    """A published directory (summaries, no requests.csv) is refused, not overwritten empty."""
    report.build(experiment_dir, with_figures=False)
    for csv in experiment_dir.glob("runs/*/requests.csv"):
        csv.unlink()
    before = {p: p.read_bytes() for p in (experiment_dir / "summary.json", experiment_dir / "report.html")}
    assert main(["report", str(experiment_dir)]) == 2
    assert "no run has its raw logs" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before
