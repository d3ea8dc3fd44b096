"""Experiment files: the shipped ones validate; bad ones fail naming file, key and expectation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import EXPERIMENT_TOML

from shortfirst_lab.__main__ import main
from shortfirst_lab.spec.experiment import ExperimentError, load_experiment, parse_rate
from shortfirst_lab.spec.schema import SpecError
from shortfirst_lab.testbed.placement import Placement

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", ["demo.toml", "tocs-lan.toml", "tocs-lan-kernel.toml"])
def test_shipped_experiments_validate(name):
    exp = load_experiment(EXPERIMENTS / name)
    assert set(exp.policies) >= {"fair", "srpt"}
    assert exp.workload.kind == "wc98like"
    assert exp.client.model == "open"
    assert exp.uplink.rate_bits_per_s == 10_000_000


def test_minimal_file_gets_documented_defaults(tmp_path):
    exp = load_experiment(_write(tmp_path, EXPERIMENT_TOML))
    assert exp.uplink.rate_bits_per_s == 10_000_000
    assert exp.uplink.mtu == 1500
    assert exp.uplink.accept_queue == 512
    assert exp.uplink.queue_packets == 10_000
    assert exp.uplink.congestion_control == ""
    assert exp.client.model == "open"
    assert exp.calibration.repeats == 5
    assert exp.run.warmup_s == 10.0


def test_matrix_order_and_seeds(tmp_path):
    exp = load_experiment(_write(tmp_path, EXPERIMENT_TOML.replace("repeats = 1", "repeats = 2")))
    ids = [(r.run_id, r.seed) for r in exp.matrix()]
    assert ids == [
        ("fair-load0.70-rep1", 3), ("srpt-load0.70-rep1", 3),
        ("fair-load0.70-rep2", 4), ("srpt-load0.70-rep2", 4),
        ("fair-load0.90-rep1", 3), ("srpt-load0.90-rep1", 3),
        ("fair-load0.90-rep2", 4), ("srpt-load0.90-rep2", 4),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        (
            lambda t: t.replace('policies = ["fair", "srpt"]', 'policies = ["fair", "lifo"]'),
            "experiment.policies",
            "each policy one of fair|srpt|srpt2",
        ),
        (lambda t: t.replace("loads = [0.7, 0.9]", "loads = [0.7, 2.0]"), "experiment.loads", "(0, 1.5]"),
        (lambda t: t.replace("loads = [0.7, 0.9]", "loads = []"), "experiment.loads", "non-empty list"),
        (lambda t: t.replace("repeats = 1", 'repeats = "two"'), "experiment.repeats", "an integer"),
        (lambda t: t.replace("duration_s = 100", "duration_s = -1"), "run.duration_s", "a number > 0"),
        (lambda t: t.replace("warmup_s = 10", "warmup_s = 100"), "run.warmup_s", "less than run.duration_s"),
        (lambda t: t.replace("files = 100", "files = 1.5"), "workload.files", "an integer"),
        (lambda t: t.replace("files = 100\n", ""), "workload.files", "this key (it is required)"),
        (lambda t: t + '\n[uplink]\nrate = "fast"\n', "uplink.rate", 'a rate such as "10mbit"'),
        (lambda t: t + "\n[uplink]\nmtu = 100\n", "uplink.mtu", "an integer in [576, 9000]"),
        (
            lambda t: t + "\n[uplink]\nqueue_packets = 0\n",
            "uplink.queue_packets",
            "an integer in [1, 100000]",
        ),
        (
            lambda t: t + '\n[uplink]\ncongestion_control = "re no"\n',
            "uplink.congestion_control",
            "a TCP congestion control name",
        ),
        (lambda t: t + '\n[client]\nmodel = "lazy"\n', "client.model", "open, partly-open:K"),
        (lambda t: t + '\n[server]\ncutoffs = "1K,banana"\n', "server.cutoffs", '"auto"'),
        (lambda t: t + '\n[server]\nrrt_cutoffs = "50ms,soon"\n', "server.rrt_cutoffs", '"50ms,100ms,1s"'),
        (lambda t: t + "\n[server]\nextra_args = [1]\n", "server.extra_args", "a list of strings"),
        (
            lambda t: t.replace("warmup_s = 10", "warmup_s = 10\ndrain_timeout_s = 100"),
            "run.drain_timeout_s",
            "more than client.timeout_s (300)",
        ),
        (
            lambda t: t + "\n[server]\nsend_buffer_bytes = -1\n",
            "server.send_buffer_bytes",
            "an integer in [0,",
        ),
        (lambda t: t.replace("seed = 3", "seed = 3\nsede = 4"), "experiment.sede", "one of the known keys"),
        (lambda t: t + "\n[extra]\nx = 1\n", "extra", "one of the sections"),
        (
            lambda t: t.replace("[run]\nduration_s = 100\nwarmup_s = 10\n", ""),
            "run",
            "this section (it is required)",
        ),
        (
            lambda t: t.replace('name = "synthetic"', 'name = "has space"'),
            "experiment.name",
            "letters, digits",
        ),
    ],
)
def test_validation_errors_name_file_key_and_expectation(tmp_path, edit, key, expected):
    p = _write(tmp_path, edit(EXPERIMENT_TOML))
    with pytest.raises(ExperimentError) as ei:
        load_experiment(p)
    e = ei.value
    assert e.key == key
    assert expected in e.expected
    assert str(e).startswith(f"{p}: {key}: expected ")


def test_toml_syntax_error_names_file_and_position(tmp_path):
    p = _write(tmp_path, "[experiment\nname = 1\n")
    with pytest.raises(SpecError, match=r"exp\.toml: expected valid TOML \(.*line 1"):
        load_experiment(p)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="expected a readable file"):
        load_experiment(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("raw", "bits"),
    [
        ("10mbit", 10_000_000),
        ("100Mbit", 100_000_000),
        ("1.5mbit", 1_500_000),
        ("64kbit", 64_000),
        (10_000_000, 10_000_000),
        ("1gbit", 1_000_000_000),
    ],
)
def test_parse_rate(raw, bits):
    assert parse_rate(raw) == bits


def test_cli_validate_reports_error_with_exit_2(tmp_path, capsys):
    p = _write(tmp_path, EXPERIMENT_TOML.replace("loads = [0.7, 0.9]", "loads = [0.7, 0.7]"))
    assert main(["validate", str(p)]) == 2
    assert "experiment.loads: expected no duplicates" in capsys.readouterr().err
    assert main(["validate", str(EXPERIMENTS / "demo.toml")]) == 0


def test_cli_run_passes_overrides(tmp_path, monkeypatch, capsys):
    from shortfirst_lab.runners import static as runner

    seen = {}

    def fake_run(exp_path, out, bin_path, resume=False, progress=True, overrides=None, placement=None):
        seen["exp"] = load_experiment(exp_path, overrides)
        seen["placement"] = placement
        return {"runs": [], "comparisons": []}

    monkeypatch.setattr(runner, "run_experiment", fake_run)
    p = _write(tmp_path, EXPERIMENT_TOML)
    argv = [
        "run",
        str(p),
        "--out",
        str(tmp_path / "o"),
        "--set",
        "run.duration_s=50",
        "--set",
        "experiment.loads=[0.8]",
    ]
    cpu = min(os.sched_getaffinity(0))
    assert main([*argv, "--generator-cpus", str(cpu)]) == 0
    assert seen["exp"].run.duration_s == 50
    assert seen["exp"].loads == (0.8,)
    assert seen["placement"] == Placement(None, frozenset({cpu}))
    assert "with overrides: run.duration_s=50 experiment.loads=[0.8]" in seen["exp"].source
    # The effective file round-trips: what is stored beside results loads to the same experiment.
    stored = _write(tmp_path, seen["exp"].source)
    assert load_experiment(stored).to_dict() == seen["exp"].to_dict()


def test_srrt_experiment_reproduces_the_papers_groups():
    exp = load_experiment(EXPERIMENTS / "srrt.toml")
    assert exp.policies == ("fair", "srpt", "srrt")
    assert exp.workload.kind == "surge"
    assert exp.uplink.rate_bits_per_s == 10_000_000
    table_1 = [
        (50, 10, 0.005),
        (100, 20, 0.01),
        (150, 30, 0.015),
        (200, 40, 0.02),
        (250, 40, 0.025),
        (350, 50, 0.03),
    ]
    assert [(g.path.rtt_ms, g.path.jitter_ms, g.path.loss) for g in exp.client.groups] == table_1
