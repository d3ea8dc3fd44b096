"""Provenance of a run: what was run, where, when, from which code — and atomic file writes.

Recorded once per experiment directory (`provenance.json`) so a report can always say which
commit, kernel and machine produced its numbers (brief §5).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def cpu_model() -> str | None:
    """The CPU model name from /proc/cpuinfo, or None if absent (bench/benchlib.py uses it too)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def collect(repo: Path, argv: list[str] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Git commit (and whether the tree was dirty), kernel, CPUs, date, command line."""
    argv = sys.argv if argv is None else argv
    status = _git(["status", "--porcelain", "--untracked-files=no"], repo)
    out: dict[str, Any] = {
        "git_commit": _git(["rev-parse", "HEAD"], repo),
        "git_branch": _git(["rev-parse", "--abbrev-ref", "HEAD"], repo),
        "git_dirty": bool(status) if status is not None else None,
        "kernel": platform.release(),
        "os": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "date_utc": utc_now(),
        "command_line": shlex.join(argv),
        "uid": os.getuid(),
    }
    if extra:
        out.update(extra)
    return out


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write to a temporary file in the same directory, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        # mkstemp creates 0600; give the file the permissions a plain open() would (umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")
