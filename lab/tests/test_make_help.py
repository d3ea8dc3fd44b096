"""`make help` lists every target of the Makefile and mk/*.mk, each with one line.

The list is generated from the `## ` comment on each target's rule line, so a target added
without one is caught here rather than silently missing from the help."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULE = re.compile(r"^([a-zA-Z0-9_][a-zA-Z0-9_.-]*)\s*:(?!=)")


def defined_targets() -> set[str]:
    targets = set()
    for makefile in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]:
        for line in makefile.read_text().splitlines():
            m = RULE.match(line)
            if m:
                targets.add(m.group(1))
    return targets


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_lists_every_target_with_a_description():
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    listed = {}
    for line in out.splitlines()[1:]:
        name, _, description = line.strip().partition(" ")
        listed[name] = description.strip()
    targets = defined_targets()
    assert {"help", "demo", "test", "lint", "bench"} <= targets
    missing = sorted(targets - listed.keys())
    assert not missing, f"targets without a '## ' description on their rule line: {missing}"
    assert all(listed[t] for t in targets), "every target needs a one-line description"
    assert set(listed) <= targets, f"listed but not defined: {sorted(set(listed) - targets)}"
