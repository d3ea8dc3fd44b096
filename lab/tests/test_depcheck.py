"""The dependency check `make lint` runs: declared-but-unused, used-but-undeclared, and the
lock's direct dependencies against pyproject.toml, as tables; and the real project passes."""

import subprocess
import sys
from pathlib import Path

import pytest

from shortfirst_lab import depcheck

LAB = Path(__file__).resolve().parents[1]
REPO = LAB.parent

PYPROJECT = {
    "project": {
        "name": "demo",
        "dependencies": ["numpy>=1.26", "Py_Route2>=0.7"],
        "optional-dependencies": {"dev": ["pytest>=8", "ruff>=0.6"]},
    },
    "tool": {"shortfirst": {"depcheck": {"commands": ["ruff"]}}},
}
PROVIDERS = {"numpy": ["numpy"], "pytest": ["pytest"], "_pytest": ["pytest"], "yaml": ["PyYAML"]}
LOCK = """\
numpy==2.0 \\
    --hash=sha256:00
    # via demo (pyproject.toml)
py-route2==0.9 \\
    --hash=sha256:00
    # via demo (pyproject.toml)
pytest==9.0 \\
    --hash=sha256:00
    # via demo (pyproject.toml)
ruff==0.1 \\
    --hash=sha256:00
    # via demo (pyproject.toml)
pluggy==1.0 \\
    --hash=sha256:00
    # via pytest
"""


@pytest.mark.parametrize(
    ("imported", "lock", "problems"),
    [
        # Everything used: nothing to say (ruff is a command, stdlib and local modules don't count).
        ({"numpy", "pytest", "py_route2", "json", "conftest"}, None, []),
        ({"numpy", "pytest", "py_route2"}, LOCK, []),
        # A declared dependency nothing imports.
        (
            {"numpy", "pytest"},
            None,
            ["dependency py-route2: declared in pyproject.toml but imported nowhere"],
        ),
        # An import no declared dependency provides (named by its distribution).
        ({"numpy", "pytest", "py_route2", "yaml"}, None, ["import yaml: no declared dependency provides it"]),
        # The lock still pins what pyproject.toml no longer declares, and the reverse.
        (
            {"numpy", "pytest", "py_route2"},
            LOCK.replace("py-route2==0.9", "scipy==1.0"),
            [
                "dependency py-route2: declared in pyproject.toml but not in the lock",
                "lock pins scipy for demo, which pyproject.toml does not declare",
            ],
        ),
    ],
)
def test_check(imported, lock, problems):
    got = depcheck.check(PYPROJECT, imported, {"conftest"}, PROVIDERS, lock)
    assert len(got) == len(problems)
    for line, want in zip(got, problems, strict=True):
        assert line.startswith(want)


@pytest.mark.parametrize(
    ("spec", "name"),
    [("numpy>=1.26", "numpy"), ("Py_Route2 >= 0.7", "py-route2"), ("pkg[extra]; python_version>'3'", "pkg")],
)
def test_requirement_names(spec, name):
    assert depcheck.requirement_name(spec) == name


def test_imports_skip_relative_ones():
    src = "import os.path, numpy as np\nfrom scipy import stats\nfrom . import kit\nfrom .x import y\n"
    assert depcheck.imports_of(src) == {"os", "numpy", "scipy"}


def test_the_project_declares_what_it_imports():
    roots = [
        LAB,
        REPO / "bench",
        REPO / "crates" / "gatekeeper" / "bench",
        REPO / "crates" / "load" / "bench",
    ]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "shortfirst_lab",
            "depcheck",
            "--pyproject",
            str(LAB / "pyproject.toml"),
            "--lock",
            str(LAB / "requirements.lock"),
            *map(str, roots),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
