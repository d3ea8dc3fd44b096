"""Named network namespaces owned by a run: the commands that build them, the per-run lock
that tells a live run from a dead one, and the removal of what dead runs left.

A run holds an exclusive ``flock`` on ``LOCK_DIR/<prefix><id>.lock`` from before its first
namespace exists until after its last is gone. The kernel drops the lock when the process
dies, however it dies, so :func:`cleanup_leftovers` removes exactly the namespaces whose run
is dead and never those of a live concurrent run. Used by :mod:`shortfirst_lab.testbed.bed` and
:mod:`shortfirst_lab.testbed.wan`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import subprocess
from pathlib import Path

from ..kit import LabError

PREFIX = "sf"
LOCK_DIR = Path("/run/shortfirst-testbed")
#: Seconds any single ``ip``/``tc``/``ethtool`` command may take.
COMMAND_TIMEOUT_S = 30.0


class TestbedError(LabError, RuntimeError):
    """A testbed could not be built, used or removed; the message says which step."""

    __test__ = False  # not a pytest test class


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs a set-up command; failure raises TestbedError naming it and its stderr."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise TestbedError(f"`{argv[0]}` not found: install iproute2/ethtool (make apt)") from e
    except subprocess.TimeoutExpired as e:
        raise TestbedError(f"`{' '.join(argv)}` took longer than {timeout} s") from e
    if out.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed (exit {out.returncode}): {out.stderr.strip()}")
    return out


def _lock_path(prefix: str, run_id: str) -> Path:
    return LOCK_DIR / f"{prefix}{run_id}.lock"


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive lock on ``path``, or None if a live run holds it."""
    LOCK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _list_netns() -> list[str]:
    out = _run(["ip", "netns", "list"]).stdout
    # Lines look like "name (id: 3)" or just "name".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _add_netns(ns: str) -> None:
    """Creates ``ns`` with its loopback up and IPv6 off (every link made in it later too).

    The testbeds speak IPv4 only. With IPv6 on, each new link gets a link-local address that
    turns from tentative to valid a second or two later (duplicate address detection), and
    Chromium, which watches the namespace's addresses, then fails every request in flight
    with ``ERR_NETWORK_CHANGED``: measured, one page load in about 45 (three runs of the
    browser test's experiment) lost the resources it had in flight so, in a testbed's first
    seconds."""
    _run(["ip", "netns", "add", ns])
    _run(["ip", "-n", ns, "link", "set", "lo", "up"])
    _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
          "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])  # fmt: skip


def _kill_netns_processes(ns: str) -> None:
    """SIGKILLs the processes left inside ``ns`` (all were started by a testbed run)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
    for pid in (int(p) for p in out.stdout.split() if p.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _delete_netns(ns: str) -> None:
    _kill_netns_processes(ns)
    out = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True, check=False)
    if out.returncode != 0 and ns in _list_netns():
        raise TestbedError(f"could not delete namespace {ns}: {out.stderr.strip()}")


def cleanup_leftovers(prefix: str = PREFIX) -> list[str]:
    """Removes namespaces and root-namespace links of testbed runs that are no
    longer alive (their lock is free), e.g. after a crash or SIGKILL.

    Only names of the testbed's exact shape are considered
    (``<prefix><id>-srv|sw|c<n>|h<n>`` namespaces, ``h<n>`` a farm's hosts;
    ``<prefix><id>-…`` veth/bridge links), and a run whose lock is held by a live
    process is left alone, so this is safe while other runs are going on. Returns
    what it removed.
    """
    ns_re = re.compile(rf"^{re.escape(prefix)}([a-z0-9]{{1,6}})-(srv|sw|c\d{{1,2}}|h\d{{1,2}})$")
    link_re = re.compile(rf"^{re.escape(prefix)}([a-z0-9]{{1,6}})-(s|sp|br|c\d{{1,2}}p?|h\d{{1,2}}p?)$")
    by_run: dict[str, list[tuple[str, str]]] = {}
    for ns in _list_netns():
        if m := ns_re.match(ns):
            by_run.setdefault(m.group(1), []).append(("netns", ns))
    links = json.loads(_run(["ip", "-j", "link", "show"]).stdout or "[]")
    for link in links:
        if m := link_re.match(link.get("ifname", "")):
            by_run.setdefault(m.group(1), []).append(("link", link["ifname"]))
    removed: list[str] = []
    for run_id, items in sorted(by_run.items()):
        lock = _lock_path(prefix, run_id)
        fd = _try_lock(lock)
        if fd is None:
            continue  # a live run owns these
        try:
            for kind, name in items:
                if kind == "netns":
                    _delete_netns(name)
                else:
                    subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
                removed.append(name)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed
