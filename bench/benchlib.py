"""Helpers shared by the benchmark scripts (bench/serve.py, crates/*/bench/*.py).

What every benchmark needs and must do the same way: a free loopback port,
waiting until a child listens on it, the git commit and the machine a result
came from, and writing the result JSON atomically. Standard library only, so
the benches run with the system python3 (the Makefile's $(PYTHON)).

Scripts outside bench/ import it with
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The repository root (this file is ROOT/bench/benchlib.py): git runs there,
#: whatever the caller's working directory.
REPO = Path(__file__).resolve().parents[1]

# The lab's provenance module is standard-library only too: one reading of the
# machine for benches and experiments alike.
sys.path.insert(0, str(REPO / "lab"))
from shortfirst_lab import provenance as _provenance  # noqa: E402


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` at the time of the call (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: Any = None, timeout_s: float = 10.0, host: str = "127.0.0.1") -> None:
    """Wait until something accepts TCP connections on host:port.

    `proc` (a subprocess.Popen, optional) is the child expected to listen: if it
    exits first, fail at once instead of waiting out the timeout. Raises
    RuntimeError naming the port (or the child's exit code)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args[0]} exited with {proc.returncode} before listening on {host}:{port}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {host}:{port} after {timeout_s} s")


def git_commit() -> str:
    """The commit of the repository the benchmark ran from, `-dirty` if the tree had
    uncommitted changes ("unknown" outside a git checkout)."""
    try:
        r = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "unknown"


def cpu_model() -> str:
    return _provenance.cpu_model() or "unknown"


def machine() -> dict:
    """The machine as a result should record it. The load average matters on a
    shared machine: a figure measured at load 20 and one at load 1 differ."""
    return {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
        "loadavg": list(os.getloadavg()),
        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: Path, obj: Any) -> None:
    """Write `obj` as JSON to `path` via a temporary file and a rename, so a reader
    never sees a half-written result (nor is an old one lost to a crash)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


#: The cpuidle-haltpoll driver's guest polling limit (ns): how long an idle vCPU polls
#: before it halts and has to be woken by the host. Machine-global.
HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
#: The lock benchmarks hold so that no two of them run at once.
BENCH_LOCK = Path("/run/shortfirst-bench.lock")


def read_halt_poll() -> int | None:
    """The current guest_halt_poll_ns, or None where the driver is absent."""
    return int(HALT_POLL.read_text().strip()) if HALT_POLL.exists() else None


def bench_lock_held_by_ancestor() -> bool:
    """Whether a flock on BENCH_LOCK is held by this process or one of its ancestors
    (`flock /run/shortfirst-bench.lock ... make ...`), from /proc/locks."""
    try:
        inode = BENCH_LOCK.stat().st_ino
        locks = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    holders = set()
    for line in locks:
        f = line.split()
        if "->" in f or len(f) < 6 or f[1] != "FLOCK":
            continue  # "->" marks a waiter, not a holder
        if f[5].rsplit(":", 1)[-1] == str(inode):
            holders.add(int(f[4]))
    pid = os.getpid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


@contextlib.contextmanager
def halt_poll_ns(value: int | None):
    """Set the guest's halt polling (machine-global) for the duration, then restore it,
    whatever happens (an exception, or SystemExit from a signal handler). Yields the
    value before. None: leave it alone."""
    if value is None:
        yield None
        return
    before = HALT_POLL.read_text().strip()
    try:
        HALT_POLL.write_text(str(value))
        yield int(before)
    finally:
        HALT_POLL.write_text(before)
        restored = HALT_POLL.read_text().strip()
        if restored != before:
            raise RuntimeError(f"{HALT_POLL}: restoring {before} failed, it reads {restored}")
