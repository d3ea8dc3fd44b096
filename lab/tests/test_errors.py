"""One base error for the lab: every exception class of the lab derives from `LabError`, and
the command line prints one as one line naming what and where, exit code 2, no traceback."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import shortfirst_lab
from shortfirst_lab.kit import LabError, error_line

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(shortfirst_lab.__path__, "shortfirst_lab.")
    if not m.name.endswith(".__main__")
)


def _exception_classes() -> dict[str, type]:
    """Every exception class defined in a module of the lab, by qualified name."""
    found = {}
    for name in MODULES:
        mod = importlib.import_module(name)
        for cls in vars(mod).values():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == name:
                found[f"{name}.{cls.__qualname__}"] = cls
    return found


def test_every_exception_class_of_the_lab_derives_from_lab_error():
    classes = _exception_classes()
    assert "shortfirst_lab.spec.expmodel.ExperimentError" in classes and len(classes) >= 19
    assert [n for n, c in classes.items() if c is not LabError and not issubclass(c, LabError)] == []


def test_error_line_is_one_line():
    assert error_line(LabError("a.toml: run.duration_s:\n  expected a number")) == (
        "error: a.toml: run.duration_s: expected a number"
    )


def test_cli_prints_a_lab_error_as_one_line_with_exit_2(tmp_path):
    """A LabError raised deep inside a subcommand (here: the report of a directory that is no
    experiment) reaches the user as one line naming the file, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "shortfirst_lab", "report", "--resimulate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'experiment.toml'}: missing; is {tmp_path} an experiment directory?"
    ]
    assert "Traceback" not in proc.stderr
