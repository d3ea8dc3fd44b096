"""Reserve CPUs for a long experiment with cpusets: the experiment alone on its CPU(s), every
other process of the machine moved to the rest.

A sweep that calibrates a capacity and then measures against it must see the same machine
throughout; on a shared machine the other jobs' load moves from CPU to CPU and changes what
one point measures. `taskset` pins the experiment but not the others; a cpuset reservation
keeps the others off its CPU too.

    python -m shortfirst_lab cpus status
    python -m shortfirst_lab cpus reserve 1 [--dry-run]   # CPU 1 for the experiment
    python -m shortfirst_lab cpus run -- CMD ARGS...       # run CMD on the reserved CPU(s)
    python -m shortfirst_lab cpus release [--dry-run]
    python -m shortfirst_lab cpus slice US -- CMD ARGS...  # run CMD with a time slice of US µs

`reserve` creates two cpusets under the cpuset hierarchy's root, NAME-reserved (the CPUs
given) and NAME-rest (every other CPU), and moves every process of the root cpuset into
NAME-rest; top-level cpusets that already exist (a container runtime's, systemd's) are
narrowed to the rest's CPUs, their old CPUs saved in STATE_FILE and restored by `release`.
Processes the kernel will not move (per-CPU kernel threads) stay where they are and are
counted. Children inherit their parent's cpuset, so what the others start later stays off
the reserved CPUs; `run` moves itself into NAME-reserved and then execs the command.
`release` moves everything back to the root and removes both cpusets.

Works with the cgroup-v1 cpuset hierarchy (/sys/fs/cgroup/cpuset) and with cgroup v2 where
the cpuset controller is available (it enables it in the root's subtree_control). Needs
root. Standard library only.

`slice` is the other knob of the CPU a process gets: the kernel's fair scheduler (EEVDF, Linux
6.6 and later) gives each task a time slice (`sched_attr.sched_runtime`, Linux 6.12 and
later; `base_slice_ns` by default), and a waking task with a shorter slice has an earlier
deadline, so it preempts a long-running one sooner. It sets the slice of this process and
execs the command: the slice is kept across exec and inherited by every thread the command
starts.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..kit import LabError, write_json

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Where `reserve` remembers the CPUs of the top-level cpusets it narrowed.
STATE_FILE = Path("/run/shortfirst-cpus.json")
#: Passes over the root's processes: a process forked during a pass is moved by the next.
MOVE_PASSES = 3
#: Limit on the CPU list a machine may name (bounds parsing of untrusted text).
MAX_CPUS = 4096


class CpusError(LabError, RuntimeError):
    """No usable cpuset hierarchy, a bad CPU list, or a reservation in the way."""


def parse_cpulist(text: str) -> set[int]:
    """The kernel's CPU list format (``0-3,5``; empty: none) as a set. Raises CpusError."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise CpusError(f"CPU list {text.strip()!r}: {part!r} is not N or N-M") from None
        if a < 0 or b < a or b >= MAX_CPUS:
            raise CpusError(f"CPU list {text.strip()!r}: bad range {part!r}")
        out.update(range(a, b + 1))
    return out


def format_cpulist(cpus: set[int]) -> str:
    """A set of CPUs in the kernel's list format, ranges collapsed (``{0,1,2,5}`` → ``0-2,5``)."""
    parts: list[str] = []
    for c in sorted(cpus):
        if parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == c - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        elif parts and "-" not in parts[-1] and int(parts[-1]) == c - 1:
            parts[-1] = f"{parts[-1]}-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts)


@dataclass(frozen=True)
class Hierarchy:
    """Where the cpuset controller lives: cgroup ``version`` 1 or 2 and the root directory."""

    version: int
    base: Path

    def cpus_file(self, group: Path) -> Path:
        return group / ("cpuset.effective_cpus" if self.version == 1 else "cpuset.cpus.effective")

    def mems_file(self, group: Path) -> Path:
        return group / ("cpuset.effective_mems" if self.version == 1 else "cpuset.mems.effective")


def detect(root: Path = CGROUP_ROOT) -> Hierarchy:
    """The cpuset hierarchy under ``root``: v2 at the root (unified mode), the v1 ``cpuset``
    hierarchy (legacy and hybrid modes), or v2 under ``unified`` (hybrid) if it has the cpuset
    controller. Raises CpusError naming what was looked at."""
    for base in (root, root / "unified"):
        controllers = base / "cgroup.controllers"
        if controllers.exists() and "cpuset" in controllers.read_text().split():
            return Hierarchy(2, base)
    if (root / "cpuset" / "cpuset.cpus").exists():
        return Hierarchy(1, root / "cpuset")
    raise CpusError(
        f"no cpuset controller under {root}: neither a cgroup-v2 cgroup.controllers listing cpuset "
        f"(at {root} or {root / 'unified'}) nor a cgroup-v1 {root / 'cpuset'} hierarchy"
    )


def _write(path: Path, value: str) -> None:
    """One write to a cgroup file (cgroupfs takes one value per write(2))."""
    with open(path, "w") as f:
        f.write(value)


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


class CpuReservation:
    """The two cpusets of a reservation, ``NAME-reserved`` and ``NAME-rest``, in ``hierarchy``."""

    def __init__(self, hierarchy: Hierarchy, name: str = "shortfirst", state_file: Path = STATE_FILE):
        self.h = hierarchy
        self.reserved = hierarchy.base / f"{name}-reserved"
        self.rest = hierarchy.base / f"{name}-rest"
        self.state_file = state_file

    def reserved_cpus(self) -> set[int]:
        """The CPUs the reservation holds (its ``cpuset.cpus``); raises OSError without one."""
        return parse_cpulist((self.reserved / "cpuset.cpus").read_text())

    def online(self) -> set[int]:
        return parse_cpulist(self.h.cpus_file(self.h.base).read_text())

    def others(self) -> list[Path]:
        """Top-level cpusets that are not ours (a container runtime's, systemd's slices)."""
        ours = {self.reserved, self.rest}
        return sorted(d for d in self.h.base.iterdir() if d.is_dir() and d not in ours)

    def plan(self, cpus: set[int]) -> dict:
        """What ``reserve(cpus)`` would do, without doing it."""
        online = self.online()
        if not cpus or not cpus <= online:
            raise CpusError(
                f"CPUs {format_cpulist(cpus)!r}: must be a non-empty subset of {format_cpulist(online)}"
            )
        rest = online - cpus
        if not rest:
            raise CpusError(f"reserving {format_cpulist(cpus)} would leave no CPU for the other processes")
        return {
            "hierarchy": f"cgroup v{self.h.version} at {self.h.base}",
            "reserved_cpus": format_cpulist(cpus),
            "rest_cpus": format_cpulist(rest),
            "mems": self.h.mems_file(self.h.base).read_text().strip(),
            "processes_to_move": len(_pids(self.h.base)),
            "groups_to_narrow": [d.name for d in self.others()],
        }

    def _make(self, group: Path, cpus: str, mems: str) -> None:
        group.mkdir(exist_ok=True)
        # cpuset.mems before any task: a v1 cpuset with no memory nodes refuses tasks.
        _write(group / "cpuset.mems", mems)
        _write(group / "cpuset.cpus", cpus)

    def move(self, pid: int, group: Path) -> bool:
        """Moves process ``pid`` (all its threads) into ``group``; False if the kernel refuses
        (a per-CPU kernel thread: EINVAL) or the process is gone (ESRCH)."""
        try:
            _write(group / "cgroup.procs", str(pid))
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ESRCH, errno.ENOENT, errno.EBUSY):
                return False
            raise
        return True

    def create(self, cpus: set[int]) -> dict:
        """Creates the two cpusets (no process moved yet); returns the plan. Refuses when a
        reservation with other CPUs exists (release it first)."""
        plan = self.plan(cpus)
        if self.reserved.exists():
            have = self.reserved_cpus()
            if have != cpus:
                raise CpusError(
                    f"{self.reserved} already reserves CPUs {format_cpulist(have)}: release it first"
                )
        if self.h.version == 2:
            _write(self.h.base / "cgroup.subtree_control", "+cpuset")
        self._make(self.rest, plan["rest_cpus"], plan["mems"])
        self._make(self.reserved, plan["reserved_cpus"], plan["mems"])
        return plan

    def reserve(self, cpus: set[int]) -> dict:
        """``create``, then every other process to the rest: the root's processes moved, other
        top-level cpusets narrowed. The same reservation again only moves what started since."""
        plan = self.create(cpus)
        narrowed = self._narrow_others(plan["rest_cpus"])
        moved, stayed = self._move_all(self.h.base, self.rest)
        return {**plan, "moved": moved, "not_movable": stayed, "narrowed": narrowed}

    def _narrow_others(self, rest_cpus: str) -> dict[str, str]:
        """Narrows the other top-level cpusets to the rest's CPUs, saving their old CPUs."""
        state = self._state()
        for d in self.others():
            cpus_file = d / "cpuset.cpus"
            if not cpus_file.exists() or d.name in state:
                continue
            old = cpus_file.read_text().strip()
            try:
                _write(cpus_file, rest_cpus)
            except OSError as e:
                print(f"cpus: {d}: cannot narrow to {rest_cpus}: {e.strerror}", file=sys.stderr)
                continue
            state[d.name] = old
            write_json(self.state_file, state)
        return state

    def _state(self) -> dict[str, str]:
        return json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    def _move_all(self, src: Path, dst: Path) -> tuple[int, int]:
        """Moves every process of ``src`` into ``dst``, in up to MOVE_PASSES passes; returns
        (moved, left behind)."""
        moved, stuck = 0, set()
        for _ in range(MOVE_PASSES):
            todo = [p for p in _pids(src) if p not in stuck]
            if not todo:
                break
            for pid in todo:
                if self.move(pid, dst):
                    moved += 1
                else:
                    stuck.add(pid)
        return moved, len(stuck)

    def release(self) -> dict:
        """Moves everything back to the root, restores narrowed cpusets, removes ours."""
        moved = 0
        for group in (self.reserved, self.rest):
            if group.exists():
                moved += self._move_all(group, self.h.base)[0]
        restored = {}
        for name, cpus in self._state().items():
            d = self.h.base / name
            if d.exists():
                _write(d / "cpuset.cpus", cpus)
                restored[name] = cpus
        self.state_file.unlink(missing_ok=True)
        for group in (self.reserved, self.rest):
            self._remove(group)
        return {"moved_back": moved, "restored": restored}

    @staticmethod
    def _remove(group: Path) -> None:
        # A process that exited may still be counted for a moment: retry briefly.
        for _ in range(50):
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)
        raise CpusError(f"{group} still has processes: {_pids(group)}")

    def status(self) -> dict:
        out: dict = {
            "hierarchy": f"cgroup v{self.h.version} at {self.h.base}",
            "online": format_cpulist(self.online()),
        }
        for key, group in (("reserved", self.reserved), ("rest", self.rest)):
            if group.exists():
                out[key] = {
                    "cpus": (group / "cpuset.cpus").read_text().strip(),
                    "processes": len(_pids(group)),
                }
        out["root_processes"] = len(_pids(self.h.base))
        return out


#: The kernel's bounds on a fair task's slice (kernel/sched/syscalls.c), in microseconds.
SLICE_MIN_US, SLICE_MAX_US = 100, 100_000
#: sched_setattr(2) and sched_getattr(2)'s numbers on x86-64, `SCHED_FLAG_KEEP_POLICY`, and
#: `struct sched_attr` (size, policy, flags, nice, priority, runtime, deadline, period,
#: utilisation clamps).
_SYS_SCHED_SETATTR, _SYS_SCHED_GETATTR = 314, 315
_KEEP_POLICY = 0x08
_SCHED_ATTR = struct.Struct("IIQiIQQQII")


def set_slice(slice_us: int, pid: int = 0) -> None:
    """Gives task `pid` (0: the caller) a time slice of `slice_us` microseconds, keeping its
    policy and nice value (as `shortfirst gatekeeper --cpu-slice-us` does). A kernel that
    refuses it, or accepts and ignores it (before 6.12: the slice is read back), is a
    CpusError naming why."""
    if not SLICE_MIN_US <= slice_us <= SLICE_MAX_US:
        raise CpusError(f"slice: {slice_us} µs is outside the kernel's {SLICE_MIN_US}..{SLICE_MAX_US} µs")
    if os.uname().machine != "x86_64":
        raise CpusError(f"slice: sched_setattr is known here on x86_64 only, not {os.uname().machine}")
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    fields = (_SCHED_ATTR.size, os.SCHED_OTHER, _KEEP_POLICY, nice, 0, slice_us * 1000, 0, 0, 0, 0)
    attr = ctypes.create_string_buffer(_SCHED_ATTR.pack(*fields), _SCHED_ATTR.size)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_SCHED_SETATTR, pid, attr, 0) != 0:
        why = os.strerror(ctypes.get_errno())
        raise CpusError(f"slice: sched_setattr refused {slice_us} µs: {why} (needs Linux 6.12 or later)")
    if libc.syscall(_SYS_SCHED_GETATTR, pid, attr, _SCHED_ATTR.size, 0) != 0:
        raise CpusError(f"slice: sched_getattr: {os.strerror(ctypes.get_errno())}")
    kept_ns = _SCHED_ATTR.unpack(attr.raw)[5]
    if kept_ns != slice_us * 1000:
        raise CpusError(f"slice: the kernel kept {kept_ns // 1000} µs (needs Linux 6.12 or later)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shortfirst_lab cpus", description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="shortfirst", help="prefix of the two cpusets (default shortfirst)")
    ap.add_argument("--cgroup-root", type=Path, default=CGROUP_ROOT)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="the hierarchy and the reservation, if any")
    r = sub.add_parser("reserve", help="reserve CPUS (kernel list format, e.g. 1 or 2-3)")
    r.add_argument("cpus")
    r.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    rel = sub.add_parser("release", help="undo the reservation")
    rel.add_argument("--dry-run", action="store_true")
    run = sub.add_parser("run", help="run a command on the reserved CPUs: run -- CMD ARGS...")
    run.add_argument("command", nargs=argparse.REMAINDER)
    sl = sub.add_parser("slice", help="run a command with a scheduler time slice: slice US -- CMD ARGS...")
    sl.add_argument("slice_us", type=int, help=f"microseconds, {SLICE_MIN_US}..{SLICE_MAX_US}")
    sl.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = getattr(a, "command", [])
    cmd = cmd[1:] if cmd[:1] == ["--"] else cmd
    if a.cmd in ("run", "slice") and not cmd:
        ap.error(f"{a.cmd}: give the command after --")
    try:
        if a.cmd == "slice":
            set_slice(a.slice_us)
            os.execvp(cmd[0], cmd)
        res = CpuReservation(detect(a.cgroup_root), a.name)
        if a.cmd == "status":
            print(json.dumps(res.status(), indent=2))
        elif a.cmd == "reserve":
            cpus = parse_cpulist(a.cpus)
            print(json.dumps(res.plan(cpus) if a.dry_run else res.reserve(cpus), indent=2))
        elif a.cmd == "release":
            print(json.dumps(res.status() if a.dry_run else res.release(), indent=2))
        else:
            if not res.reserved.exists():
                raise CpusError(f"no reservation ({res.reserved} missing): run `reserve CPUS` first")
            if not res.move(os.getpid(), res.reserved):
                raise CpusError(f"could not move this process into {res.reserved}")
            os.execvp(cmd[0], cmd)
    except (CpusError, PermissionError) as e:
        print(f"cpus: error: {e}", file=sys.stderr)
        return 1
    return 0
