"""Overload keys of experiment files: a load schedule passes to the generator, only in the
open models; the persistent-overload experiment validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXPERIMENT_TOML

from shortfirst_lab.experiment import ExperimentError, load_experiment

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _load(tmp_path: Path, client: str):
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT_TOML + "\n[client]\n" + client)
    return load_experiment(p)


def test_persistent_overload_experiment_validates():
    exp = load_experiment(EXPERIMENTS / "overload-persistent.toml")
    assert exp.loads == (1.2, 1.4) and exp.run.duration_s >= 600


@pytest.mark.parametrize("spec", ["w1", "25s@0.2,25s@1.2", "const@1.4", "file:/tmp/sched.txt"])
def test_load_schedule_is_kept(tmp_path, spec):
    exp = _load(tmp_path, f'load_schedule = "{spec}"\n')
    assert exp.client.load_schedule == spec
    assert exp.to_dict()["client"]["load_schedule"] == spec


def test_no_schedule_by_default(tmp_path):
    exp = _load(tmp_path, "")
    assert exp.client.load_schedule == "" and "load_schedule" not in exp.to_dict()["client"]


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ('load_schedule = "   "\n', "a load schedule"),
        ('model = "closed:10"\nload_schedule = "w1"\n', "open or partly-open"),
        ("load_schedule = 3\n", "a string"),
    ],
)
def test_bad_schedules_name_the_key(tmp_path, client, expected):
    with pytest.raises(ExperimentError) as e:
        _load(tmp_path, client)
    assert e.value.key == "client.load_schedule" and expected in str(e.value)
