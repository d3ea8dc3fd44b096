"""One command line: `python -m shortfirst_lab VERB`. Every verb answers --help under its own
name, every make target reaches the lab through a verb, and no other module is an entry point."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from shortfirst_lab.__main__ import BENCHES, MODULE_VERBS, SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "lab" / "shortfirst_lab"
VERBS = {*SUBCOMMANDS, *MODULE_VERBS, "bench"}


@pytest.mark.parametrize("verb", sorted(MODULE_VERBS))
def test_every_module_verb_answers_help_under_its_name(verb, capsys):
    if verb == "probe":  # a probe takes positional words only; an unknown one is refused
        with pytest.raises(SystemExit, match="unknown mode"):
            main(["probe", "--help"])
        return
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    assert f"usage: python -m shortfirst_lab {verb}" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_is_found(name):
    target = BENCHES[name][0]
    if target.endswith(".py"):
        assert (REPO / target).is_file()
    else:
        assert (LAB / (target.replace(".", "/") + ".py")).is_file()


def test_bench_without_a_name_lists_them(capsys):
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in BENCHES)


def test_the_only_entry_point_is_the_package():
    guards = [
        p.relative_to(LAB).as_posix()
        for p in LAB.rglob("*.py")
        if 'if __name__ == "__main__"' in p.read_text() or p.name == "__main__.py"
    ]
    assert guards == ["__main__.py"]


def test_make_targets_reach_the_lab_through_a_verb():
    """Every `python -m shortfirst_lab...` of the Makefile and mk/*.mk names a verb; none runs
    a lab module or a bench script directly."""
    text = "\n".join(p.read_text() for p in [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))])
    calls = re.findall(r"-m (shortfirst_lab[\w.]*)(?: ([\w-]+))?", text)
    assert calls and all(mod == "shortfirst_lab" and verb in VERBS for mod, verb in calls), calls
    assert not re.search(r"\$\(PY\) \S+\.py", text.replace("scripts/unused_deps.py", ""))


def test_a_subprocess_gets_one_error_line():
    proc = subprocess.run(
        [sys.executable, "-m", "shortfirst_lab", "tpcw", "sweep", "/nonexistent.toml", "--out", "/tmp/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == "error: /nonexistent.toml: expected a readable file (No such file or directory)\n"
