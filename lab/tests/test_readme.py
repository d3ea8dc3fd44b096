"""The README's command examples run as written.

Every fenced block in README.md carries an info string saying what it is:

  ```sh       run by this test, in order, in one scratch directory laid out like a clone
  ```sh root  run only as root (namespaces, qdiscs); skipped elsewhere with a message
  ```sh long  a long run (`make demo`, `make test`): not run here, `make test` covers it
  ```text     a synopsis or a production example that needs a real device or backend

Each block runs in `bash -eu -o pipefail` with the lab's binary (`$SHORTFIRST_BIN`, else the
release build) on PATH; its exit status must be 0. Blocks share the directory, so a later
block may use what an earlier one wrote (the workload). A block that starts a server in the
background stops it itself; anything left is killed when the block ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BIN

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN_DIR = BIN.parent
FENCE = re.compile(r"^```(.*)$")
KINDS = {"sh", "sh root", "sh long", "text"}
BLOCK_TIMEOUT_S = 180


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number, info string, body) of every fenced block."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            start, info, body = i + 1, m.group(1).strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"README.md:{start}: unclosed code block")
            out.append((start, info, "\n".join(body) + "\n"))
        i += 1
    return out


def test_every_block_says_what_it_is():
    found = blocks(README.read_text())
    assert found, "README.md has no code blocks"
    bad = [(line, info) for line, info, _ in found if info not in KINDS]
    assert not bad, f"blocks without one of the info strings {sorted(KINDS)}: {bad}"
    assert any(info == "sh" for _, info, _ in found)


def test_block_parser():
    text = "intro\n```sh\necho a\n```\n\n```text\nsynopsis\n```\n"
    assert blocks(text) == [(2, "sh", "echo a\n"), (6, "text", "synopsis\n")]


def scratch_clone(tmp: Path) -> Path:
    """A directory laid out like a fresh clone: the repository's entries linked in, with an
    empty results/ so that nothing an example writes lands in the repository's."""
    work = tmp / "clone"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in {"results", ".git"}:
            continue
        (work / entry.name).symlink_to(entry)
    (work / "results").mkdir()
    return work


def test_readme_examples_run_as_written(tmp_path):
    if not (BIN_DIR / "shortfirst").exists():
        pytest.skip(f"{BIN_DIR / 'shortfirst'} not built (make build)")
    for tool in ("bash", "curl"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make apt)")
    work = scratch_clone(tmp_path)
    env = {**os.environ, "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran, skipped = 0, []
    for line, info, body in blocks(README.read_text()):
        if info in ("text", "sh long"):
            continue
        if info == "sh root" and os.geteuid() != 0:
            skipped.append(line)
            continue
        # Stop whatever a block left in the background, whatever its exit status.
        script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body
        proc = subprocess.run(
            ["bash", "-eu", "-o", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        assert proc.returncode == 0, (
            f"README.md:{line}: block exited {proc.returncode}\n--- block\n{body}"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
        ran += 1
    assert ran >= 5, f"only {ran} README blocks ran"
    if skipped:
        pytest.skip(f"ran {ran} blocks; root-only blocks at README.md lines {skipped} skipped (not root)")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_links_work_from_a_clone():
    """Every relative link in README.md, ARCHITECTURE.md and docs/ names a file or directory
    inside the repository (no ../shared, no absolute paths)."""
    docs = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for doc in docs:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path = target.split("#", 1)[0]
            if not path:
                continue
            resolved = (doc.parent / path).resolve()
            if ROOT.resolve() not in resolved.parents and resolved != ROOT.resolve() or not resolved.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, f"links that do not work from a clone: {broken}"
