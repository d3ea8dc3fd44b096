#!/usr/bin/env python3
"""Reject history narrated in the tree: it belongs in `git log`, not in files.

A reader of the code, the docs, the tests or an experiment file has no tracker and no
diary at hand: "measured in session 5", "18:47 UTC", "on b336369" or "issue 4" tell them
nothing. A comment says *why* the code is as it is; a figure lives in docs/results.md
with its command, date, machine and commit (the one file where those belong).

Rules (each line of each tracked text file, outside EXCLUDED):

  numbered-work  a numbered session or round of past work: "session 5", "Sessions 4-6",
                 "round 3" (not "--overhead-rounds 30", not "3 rounds").
  utc-time       a wall-clock time of day with a zone: "18:47 UTC", "21:55-22:15 UTC",
                 "01:06 GMT" (not a timestamp with seconds in test data, "04:00:01 UTC").
  dated-run      a calendar date of this century introduced as when something ran or was
                 measured: "CI, 2026-11-23:", "measured on 2026-11-24", "as of 2026-01-02"
                 (not a constant such as "a fixed epoch (2025-01-01)").
  commit-hash    an abbreviated git commit: a 7-12 character hex word with both digits and
                 letters, standing alone ("on b336369"), or any hex word after "commit"
                 (not "0xdeadbeef", not a sha256 in a lock file, not a UUID or a path).
  issue-ref      a tracker reference: "issue 4", "issue #4", "issue-2", "PR #12",
                 "(#12)", "see #3" (not "job #0" or "class #1" in an error message,
                 not an HTML entity or a colour, not "RFC 9110 §8.8.3").

Usage: check_history.py [PATH...]   (default: every file `git ls-files` lists)
Exit status 1 and one line per finding (path:line: rule: text) when anything is found.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

#: Paths (fnmatch patterns, relative to the repository root) that are not checked, and why.
EXCLUDED = (
    # Raw measurements and the one document that records when and where they were made.
    "results/*",
    "docs/results.md",
    # Lock files: hashes and versions written by tools.
    "*.lock",
    "*/requirements*.lock",
    # Fuzz inputs: bytes a fuzzer wrote (request heads with dates, hex names), not prose.
    "fuzz/corpus/*",
    "fuzz/regressions/*",
    # This checker and its test spell out the patterns they reject.
    "scripts/check_history.py",
    "lab/tests/test_check_history.py",
)

#: Longest line looked at (longer lines are generated data, not prose); beyond, cut.
MAX_LINE_CHARS = 2000

RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "numbered-work",
        re.compile(r"(?<![-\w])(?:sessions?|rounds?)\s+#?\d+(?:\s*[-–]\s*\d+)?\b", re.IGNORECASE),
    ),
    (
        "utc-time",
        re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?![:\d])(?:\s*[-–]\s*\d{1,2}:\d{2}(?![:\d]))?\s*(?:UTC|GMT)\b"),
    ),
    (
        "dated-run",
        re.compile(
            r"\b(?:measured|ran|run|runs|CI|as\s+of|since|until|on|sessions?)\b[,:]?\s+"
            r"(?:on\s+)?20\d\d-[01]\d-[0-3]\d\b",
            re.IGNORECASE,
        ),
    ),
    (
        "commit-hash",
        re.compile(
            # A lone 7-12 hex word with a digit and a letter a-f (git's abbreviation): not
            # after 0x, #, a path or a word character, not part of a UUID, path or longer word.
            r"(?<![\w./:#\\-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w/\\-])"
            r"|\bcommits?\s+(?:hash\s+)?[0-9a-f]{7,40}\b"
        ),
    ),
    (
        "issue-ref",
        re.compile(
            r"(?<![\w-])issues?[\s-]+#?\d+\b"
            r"|\b(?:PRs?|pull\s+requests?|tickets?|bugs?|fix(?:es|ed)?|close[sd]?|see|cf\.?)\s+#\d+\b"
            r"|\(#\d+\)",
            re.IGNORECASE,
        ),
    ),
)


def check_line(line: str) -> list[tuple[str, str]]:
    """Every (rule, matched text) in one line; empty when the line is clean."""
    line = line[:MAX_LINE_CHARS]
    return [(name, m.group(0)) for name, pattern in RULES for m in pattern.finditer(line)]


def is_checked(path: str) -> bool:
    """Whether a repository-relative path is subject to the check."""
    return not any(fnmatch.fnmatch(path, pattern) for pattern in EXCLUDED)


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary file (NUL byte or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def findings(root: Path, paths: list[str]) -> list[str]:
    out = []
    for rel in sorted(paths):
        if not is_checked(rel):
            continue
        file = root / rel
        if not file.is_file():
            continue  # deleted in the work tree but still in the index
        text = read_text(file)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for rule, matched in check_line(line):
                out.append(f"{rel}:{number}: {rule}: {matched!r} in: {line.strip()[:160]}")
    return out


def tracked_files(root: Path) -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True
    ).stdout.decode("utf-8")
    return [p for p in listing.split("\0") if p]


def main(argv: list[str]) -> int:
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    if argv:
        paths = [str(Path(p).resolve().relative_to(root)) for p in argv]
    else:
        paths = tracked_files(root)
    found = findings(root, paths)
    for line in found:
        print(line)
    if found:
        print(
            f"check_history: {len(found)} line(s) narrate history (sessions, rounds, times, commits, "
            "issue numbers). Say why instead; figures with their date and commit go to docs/results.md.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
