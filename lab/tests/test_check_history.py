"""scripts/check_history.py: the lint that keeps history (sessions, times, commits, issue
numbers) out of code, docs, tests and experiment files. A table of lines it must reject and
lines it must leave alone, the excluded paths, and the command on a scratch repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_history.py"
check_history = load_script("scripts/check_history.py", "check_history")

BAD = [
    # (line, rule): inputs the lint must reject, shaped like the history comments it exists
    # to keep out (the script skips this file's table; nothing here describes this project)
    ("// measured in session 5 with perf sched", "numbered-work"),
    ("(Session 3: every mode within 2% of direct there)", "numbered-work"),
    ("# sessions 4-6 found the same", "numbered-work"),
    ("after round 3 the fix held", "numbered-work"),
    ("On this VM (18:47 UTC) it sustained 70,000/s", "utc-time"),
    ("# Measured 21:55-22:15 UTC on one shared core", "utc-time"),
    ("(decided 01:06 GMT)", "utc-time"),
    ("the sweep ran 18:12–18:41 UTC", "utc-time"),
    ("/// capacity halved throughput (CI, 2026-11-23: 54.7/s against a 60/s bar)", "dated-run"),
    ("measured on 2026-11-24 with 140 browsers", "dated-run"),
    ("as of 2027-01-02 the default is 5", "dated-run"),
    ("results/bench-load.json, 18:47 on b336369, host steal", "commit-hash"),
    ("fixed in de18434.", "commit-hash"),
    ("(521dbf3, CPU 1 reserved)", "commit-hash"),
    ("since commit 7784599 the proxy retries", "commit-hash"),
    ("Targets (issue 4, from Harchol-Balter 2003)", "issue-ref"),
    ('"""Issue 2, "What it must show" item 1"""', "issue-ref"),
    ("the namespace test of issue-2", "issue-ref"),
    ("see issue #12 for why", "issue-ref"),
    ("reverted by PR #31", "issue-ref"),
    ("follows the gate (#17)", "issue-ref"),
    ("see #3", "issue-ref"),
]

GOOD = [
    # Domain words and numbers that merely look like history.
    "make bench-gatekeeper-overhead GK_OVERHEAD_ARGS='--overhead-rounds 30'",
    "direct, gatekeeper and nginx in 30 alternating rounds",
    "a closed-model session walks the Markov chain; each session ends at page Exit",
    "one session per user: closed:50,think=exp:7:70",
    # Timestamps in test data (with seconds) and constant dates.
    "// 1995-07-01 04:00:01 UTC",
    "        // 2000-10-10 20:55:36 UTC",
    "//! total). Dates are offsets from a fixed epoch (2025-01-01), not the wall",
    'assert_eq!(date_string(EPOCH_DAYS), "2025-01-01");',
    "Date: Sun, 06 Nov 1994 08:49:37 GMT",
    "timeout 10:30 minutes",
    # Hashes and hex constants that are not commits.
    'sha256 = "4f5c1a0e9b8d7c6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f"',
    "numpy==2.1.3 --hash=sha256:4f5c1a0e9b8d7c6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f",
    "const MAGIC: u32 = 0xdeadbeef1;",
    "let mask = 0x1f2e3d4c;",
    "id 550e8400-e29b-41d4-a716-446655440000",
    "see results/bench-load-history/a1b2c3d4/summary.json",
    "color: #333; background: #fafafa; stroke: #1f77b4",
    "&#8212; an em dash",
    "decadent facade, deadbeef",
    "1234567 requests",
    # Ordinals in messages, section numbers, citations.
    'contains("job #0")',
    '("class #1: no \\"handle\\"")',
    "Range requests follow RFC 9110 §14.2; headers RFC 9110 §5.1",
    "Harchol-Balter 2003 §3, Figs. 5, 6, 9",
    "the issue's three targets are computed from the points",
    "issues with TSO: see the kernel's tcp_tso_should_defer",
    "load 0.9, 10 Mbit/s, 600 s per point",
    "{:#04x}",
]


@pytest.mark.parametrize(("line", "rule"), BAD)
def test_rejects_history(line, rule):
    found = check_history.check_line(line)
    assert rule in [r for r, _ in found], f"{line!r} not flagged as {rule}: {found}"


@pytest.mark.parametrize("line", GOOD)
def test_leaves_legitimate_lines_alone(line):
    assert check_history.check_line(line) == []


@pytest.mark.parametrize(
    ("path", "checked"),
    [
        ("README.md", True),
        ("ARCHITECTURE.md", True),
        ("docs/decisions/0001-bands.md", True),
        ("crates/core/src/policy.rs", True),
        ("lab/experiments/demo.toml", True),
        ("lab/tests/test_report.py", True),
        ("docs/results.md", False),
        ("results/demo/summary.json", False),
        ("results/tocs-lan/report.html", False),
        ("Cargo.lock", False),
        ("lab/requirements.lock", False),
    ],
)
def test_excluded_paths(path, checked):
    assert check_history.is_checked(path) is checked


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_command_on_a_repository(tmp_path):
    """Tracked files only, results/ skipped, binary files skipped, exit status 1 with file:line."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.rs").write_text("// why: the kernel stamps packets at transmit\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "run.json").write_text('{"commit": "b336369", "at": "18:47 UTC"}\n')
    (tmp_path / "blob.bin").write_bytes(b"\0session 5\0")
    (tmp_path / "untracked.md").write_text("issue 4\n")
    _git(tmp_path, "add", "src/ok.rs", "results/run.json", "blob.bin")
    run = [sys.executable, str(SCRIPT)]
    clean = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    (tmp_path / "src" / "bad.py").write_text("x = 1\n# measured in session 5\n")
    _git(tmp_path, "add", "src/bad.py")
    dirty = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True)
    assert dirty.returncode == 1
    assert dirty.stdout.startswith("src/bad.py:2: numbered-work: 'session 5'")
    assert "docs/results.md" in dirty.stderr
