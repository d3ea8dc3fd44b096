"""The one runner of the gatekeeper experiments, whatever the backend (`backends.base.serve`
starts it): the gatekeeper in front of it (`gatekeeper`, or `front` for a mode that may be
`direct`), `shortfirst gatekeeper calibrate` against it (`calibrate`), the load it is offered
(`write_trace`) and the load generator that offers it (`drive`). Every command line comes from
`commands`; every process is a `kit.Child`, stopped when its block ends.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import commands
from ...kit import Child, free_port, wait_http, wait_port
from ...testbed.cpus import CpuReservation, CpusError, detect
from .backends.base import GatekeeperError

#: Bound on the trace a run replays (requests).
MAX_TRACE_ROWS = 2_000_000
#: Seconds `drive` gives the load generator past the run's duration and client timeout
#: (it drains the requests still in flight) before it is killed.
DRIVE_GRACE_S = 300.0


def pinned_prefix(pin: bool | None) -> list[str]:
    """The argv prefix that runs a command on the reserved CPU, or [] (no reservation, or
    `pin` False). `pin` True without a reservation is an error."""
    if pin is False:
        return []
    try:
        reserved = CpuReservation(detect()).reserved.exists()
    except (CpusError, OSError):
        reserved = False
    if not reserved:
        if pin:
            raise GatekeeperError("--pin: no cpuset reservation (python -m shortfirst_lab cpus reserve 1)")
        return []
    return [sys.executable, "-m", "shortfirst_lab", "cpus", "run", "--"]


def slice_prefix(slice_us: int) -> list[str]:
    """The argv prefix that runs a command with a scheduler slice of `slice_us` µs
    (`cpus slice`), or [] for 0 (the kernel's slice)."""
    return [sys.executable, "-m", "shortfirst_lab", "cpus", "slice", str(slice_us), "--"] if slice_us else []


def reserved_cpus() -> tuple[int, ...]:
    """The CPUs of the cpuset reservation (those `pinned_prefix` runs a command on); () without
    one."""
    try:
        return tuple(sorted(CpuReservation(detect()).reserved_cpus()))
    except (CpusError, OSError):
        return ()


@dataclass(frozen=True)
class Gate:
    """Where a point's load goes: the gatekeeper's URL, admin port and process id, or, for
    `direct`, the backend's URL with no admin port and no process."""

    url: str
    admin_port: int | None = None
    pid: int | None = None

    @property
    def metrics_url(self) -> str | None:
        return None if self.admin_port is None else f"http://127.0.0.1:{self.admin_port}/metrics"


@contextmanager
def gatekeeper(
    binary: str | Path,
    upstream: str,
    log: Path,
    scheme: str = "http",
    prefix: list[str] | None = None,
    **flags: Any,
) -> Iterator[Gate]:
    """`shortfirst gatekeeper` in front of `upstream` (`flags`: keyword arguments of
    `commands.gatekeeper`), ready once its admin page and its listener answer; its URL has
    `scheme` (`postgres` in front of PostgreSQL). `prefix` (`pinned_prefix`) execs it on the
    reserved CPU (its process id stays the one started)."""
    port, admin = free_port(), free_port()
    argv = commands.gatekeeper(
        binary, listen=f"127.0.0.1:{port}", upstream=upstream, admin=f"127.0.0.1:{admin}", **flags
    )
    with Child([*(prefix or []), *argv], log) as child:
        wait_http(f"http://127.0.0.1:{admin}/metrics", child.proc)
        wait_port(port, child.proc)
        yield Gate(f"{scheme}://127.0.0.1:{port}", admin, child.pid)


@contextmanager
def front(binary: str | Path, upstream: str, mode: str, log: Path, **flags: Any) -> Iterator[Gate]:
    """The point's way in: `upstream` itself for `direct`, else a gatekeeper with policy
    `mode` in front of it (`gatekeeper`)."""
    if mode == "direct":
        yield Gate(upstream)
        return
    with gatekeeper(binary, upstream, log, policy=mode, **flags) as gate:
        yield gate


def drive(
    binary: str | Path, url: str, out: Path, *, duration_s: float, timeout_s: float, **load: Any
) -> float:
    """`shortfirst load` against `url` into `out` (`load`: the other keyword arguments of
    `commands.load`); its output goes to `out.load.log` beside it. Returns the wall time."""
    argv = commands.load(binary, url, out=out, duration_s=duration_s, timeout_s=timeout_s, quiet=True, **load)
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=duration_s + timeout_s + DRIVE_GRACE_S
        )
    except subprocess.TimeoutExpired:
        raise GatekeeperError(f"shortfirst load did not end ({' '.join(argv)})") from None
    wall = time.monotonic() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    (out.parent / f"{out.name}.load.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise GatekeeperError(f"shortfirst load failed ({' '.join(argv)}):\n{r.stderr[-3000:]}")
    return wall


def calibrate(binary: str | Path, upstream: str, out: Path, timeout_s: float = 1800.0, **args: Any) -> dict:
    """`shortfirst gatekeeper calibrate` against `upstream` (`args`: the other keyword
    arguments of `commands.calibrate`), its output in `calibrate.log` beside `out`; the
    calibration record it writes to `out` (its trials and best capacity)."""
    argv = commands.calibrate(binary, upstream=upstream, out=out, **args)
    try:
        r = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise GatekeeperError(f"calibrate did not end in {timeout_s:g} s") from None
    (out.parent / "calibrate.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise GatekeeperError(f"calibrate failed:\n{r.stderr[-3000:]}")
    return json.loads(out.read_text())


def write_trace(
    path: Path, draw: Callable[[random.Random], str], rate_per_s: float, duration_s: float, seed: int
) -> int:
    """A trace of Poisson arrivals at `rate_per_s` for `duration_s` (at most MAX_TRACE_ROWS
    requests), each path drawn by `draw` from the trace's generator seeded `seed` (same
    bytes for the same arguments); written to a temporary name and renamed. Returns the row
    count."""
    rng = random.Random(seed)
    t, n = 0.0, 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write("time_s,path,size_bytes\n")
        while n < MAX_TRACE_ROWS:
            t += rng.expovariate(rate_per_s)
            if t >= duration_s:
                break
            f.write(f"{t:.6f},{draw(rng)},0\n")
            n += 1
    os.replace(tmp, path)
    return n
