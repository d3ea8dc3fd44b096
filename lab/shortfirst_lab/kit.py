"""The one helper kit of the lab and the benchmarks: standard library only.

Everything a measurement must do the same way wherever it runs — pick a free port, wait
for a child to listen, record the commit and the machine, read the kernel's counters,
parse the Prometheus text our binaries serve, write a result so that no reader sees half
of it — lives here once (the binaries' command lines are in `commands`). The benches import
it from the installed lab package (`pip install -e lab`, the Makefile's `venv`), so the
same code records an experiment's provenance and a benchmark's machine.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import random
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The repository root (this file is ROOT/lab/shortfirst_lab/kit.py; the lab is installed
#: editable): git runs there, whatever the caller's working directory.
REPO = Path(__file__).resolve().parents[2]
#: Most hosts of a farm: each a namespace with its own address and `shortfirst serve`. The
#: farm spec refuses more and the farm testbed builds no more.
FARM_MAX_HOSTS = 16
#: The pages a browser experiment may load (`testbed.pages` writes them) and the peer servers
#: from Debian it may run beside `shortfirst serve` (`testbed.peers` configures them).
BROWSER_PAGES = ("generated", "rust-book")
PEER_SERVERS = ("nginx", "h2o", "caddy", "lighttpd")


def shortfirst_binary() -> Path:
    """The `shortfirst` binary the lab drives unless told another: ``$SHORTFIRST_BIN``, else
    the repository's release build (which may not exist yet: callers check)."""
    env = os.environ.get("SHORTFIRST_BIN")
    return Path(env) if env else REPO / "target" / "release" / "shortfirst"


def bookstore_binary() -> Path:
    """The TPC-W bookstore example's binary: beside `shortfirst_binary()` (one cargo build makes
    both)."""
    return shortfirst_binary().parent / "bookstore"


#: Clock ticks per second of /proc/stat and /proc/PID/stat (USER_HZ).
CLK_TCK = os.sysconf("SC_CLK_TCK")


class LabError(Exception):
    """The base of every error the lab raises on purpose: bad input (a file, a key, an
    argument) or a step that failed (a child, a run, a page). Its message names what failed
    and where; the command line (`shortfirst_lab.__main__`) prints it as one line, `error:
    MESSAGE`, and exits with code 2, without a traceback. Every exception class of the lab
    derives from it (lab/tests/test_errors.py checks)."""


def error_line(e: BaseException) -> str:
    """`e` as the command line prints it: `error: ` and its message on one line."""
    text = " ".join(str(e).split()) or type(e).__name__
    return f"error: {text}"


class KitError(LabError, RuntimeError):
    """A child did not come up, or a counter file could not be read as expected."""


# -- ports and children ------------------------------------------------------------------


#: Where `free_port` looks when the kernel's ephemeral range cannot be read.
_EPHEMERAL_LOW_FALLBACK = 32768
#: The lowest port `free_port` hands out (above the registered services people run locally).
_FREE_PORT_LOW = 20000
#: Ports this process has handed out, never handed out again (bounded: cleared when full).
_HANDED_OUT: set[int] = set()
_HANDED_OUT_MAX = 4096


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_LOW_FALLBACK


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` at the time of the call, below the kernel's ephemeral range
    and not handed out before by this process.

    Why not the kernel's choice (bind to port 0): that port comes from the ephemeral range,
    the very range outgoing connections take their local ports from, so a test running
    beside another (pytest-xdist) could find "its" port taken by a client of the other
    before its server binds it. Below the range only another server can take it; the start
    is random so that two processes rarely probe the same ports. Raises KitError when no
    port is free."""
    high = _ephemeral_low()
    low = min(_FREE_PORT_LOW, high - 1024)
    if len(_HANDED_OUT) >= _HANDED_OUT_MAX:
        _HANDED_OUT.clear()
    span = high - low
    start = random.randrange(span)
    for i in range(span):
        port = low + (start + i) % span
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise KitError(f"no free TCP port on {host} in {low}..{high - 1}")


def wait_port(port: int, proc: Any = None, timeout_s: float = 10.0, host: str = "127.0.0.1") -> None:
    """Wait until something accepts TCP connections on host:port.

    `proc` (a subprocess.Popen, optional) is the child expected to listen: if it exits
    first, fail at once instead of waiting out the timeout. Raises KitError naming the
    port (or the child's exit code)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise KitError(f"{proc.args[0]} exited with {proc.returncode} before listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise KitError(f"nothing listening on {host}:{port} after {timeout_s} s")


def wait_http(url: str, proc: Any = None, timeout_s: float = 30.0) -> None:
    """Wait until a GET of `url` answers without an HTTP error (a 4xx or 5xx counts as not
    ready: a server still starting may answer 503). `proc` as in `wait_port`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise KitError(f"{proc.args[0]} exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 400:
                    return
        except OSError:
            time.sleep(0.1)
    raise KitError(f"{url} not answering after {timeout_s} s")


class Child:
    """A child process with its output in a log file, stopped on exit (SIGTERM to this very
    process, SIGKILL after `stop_timeout_s`): a measurement never leaves a server behind."""

    def __init__(self, argv: Sequence[str], log: Path, stop_timeout_s: float = 10.0, **popen: Any):
        log = Path(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        self.stop_timeout_s = stop_timeout_s
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.proc = subprocess.Popen(list(argv), stdout=self.log, stderr=subprocess.STDOUT, **popen)
        except BaseException:
            self.log.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        """Stops the child if it still runs; returns its exit code. Safe to call twice."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- provenance: commit, machine, time ---------------------------------------------------


def git(args: list[str], cwd: Path = REPO) -> str | None:
    """`git ARGS` in `cwd`: its stripped output, or None if git failed or is absent."""
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_commit(repo: Path = REPO) -> str:
    """The commit a result came from, `-dirty` if the tree had uncommitted changes
    ("unknown" outside a git checkout)."""
    return git(["describe", "--always", "--dirty", "--abbrev=40"], repo) or "unknown"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU model name from /proc/cpuinfo, or None if absent."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine() -> dict[str, Any]:
    """The machine as a benchmark result records it. The load average matters on a shared
    machine: a figure measured at load 20 and one at load 1 differ."""
    return {
        "cpu_model": cpu_model() or "unknown",
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
        "loadavg": list(os.getloadavg()),
        "timestamp_utc": utc_now(),
    }


def provenance(repo: Path = REPO, argv: list[str] | None = None, extra: dict | None = None) -> dict:
    """What an experiment directory records (`provenance.json`) so that a report can always
    say which commit, kernel and machine produced its numbers: git commit and whether the
    tree was dirty, kernel, CPUs, date, command line."""
    argv = sys.argv if argv is None else argv
    status = git(["status", "--porcelain", "--untracked-files=no"], repo)
    out: dict[str, Any] = {
        "git_commit": git(["rev-parse", "HEAD"], repo),
        "git_branch": git(["rev-parse", "--abbrev-ref", "HEAD"], repo),
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


# -- atomic writes -----------------------------------------------------------------------


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write to a temporary file in the same directory, then rename over `path`: a reader
    never sees half a file, and a crash never loses the old one."""
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


def write_json(path: Path, obj: Any, *, allow_nan: bool = False) -> None:
    """`obj` as indented JSON, atomically. NaN is refused unless `allow_nan` (it is not
    JSON; summaries that use it for "no value" say so by passing True)."""
    write_atomic(path, json.dumps(obj, indent=2, allow_nan=allow_nan) + "\n")


# -- kernel counters ---------------------------------------------------------------------

#: The columns of a `cpu` line of /proc/stat, in order (ticks of USER_HZ).
PROC_STAT_FIELDS = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)


def parse_proc_stat(text: str) -> dict[str, dict[str, int]]:
    """The `cpu` lines of /proc/stat: {"cpu": {...}, "cpu0": {...}, ...}, each field of
    PROC_STAT_FIELDS in ticks. Fields an older kernel lacks read 0; other lines are skipped."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        name, *values = line.split()
        if not name.startswith("cpu"):
            continue
        ticks = [int(v) for v in values[: len(PROC_STAT_FIELDS)]]
        ticks += [0] * (len(PROC_STAT_FIELDS) - len(ticks))
        out[name] = dict(zip(PROC_STAT_FIELDS, ticks, strict=True))
    return out


def read_proc_stat(path: Path = Path("/proc/stat")) -> dict[str, dict[str, int]]:
    return parse_proc_stat(Path(path).read_text())


def per_cpu_ticks(stat: dict[str, dict[str, int]]) -> dict[int, dict[str, int]]:
    """The per-CPU lines of a parsed /proc/stat, by CPU number (the total line left out)."""
    return {int(k[3:]): v for k, v in stat.items() if k != "cpu" and k[3:].isdigit()}


def cpu_times(cpus: list[int], stat: Path = Path("/proc/stat")) -> dict[int, dict[str, float]]:
    """Seconds each of ``cpus`` spent busy (user, nice, system, irq, softirq), idle (idle, iowait)
    and stolen by the host, from ``/proc/stat``. A point's difference shows whether the host took
    the CPU the experiment ran on: a throughput dip with steal is the host's, not the policy's."""
    tick_s = 1.0 / CLK_TCK
    out: dict[int, dict[str, float]] = {}
    for cpu, t in per_cpu_ticks(read_proc_stat(stat)).items():
        if cpu not in cpus:
            continue
        out[cpu] = {
            "busy_s": (t["user"] + t["nice"] + t["system"] + t["irq"] + t["softirq"]) * tick_s,
            "idle_s": (t["idle"] + t["iowait"]) * tick_s,
            "steal_s": t["steal"] * tick_s,
        }
    return out


def parse_proc_pairs(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp and /proc/net/netstat: pairs of lines ``Group: names…`` /
    ``Group: values…`` (several files may be concatenated). A pair whose groups
    differ, and values that are not integers, are skipped."""
    out: dict[str, dict[str, int]] = {}
    lines = [ln for ln in text.splitlines() if ":" in ln]
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        group, _, names_rest = names.partition(":")
        vgroup, _, values_rest = values.partition(":")
        if group != vgroup:
            continue
        for k, v in zip(names_rest.split(), values_rest.split(), strict=False):
            try:
                out.setdefault(group, {})[k] = int(v)
            except ValueError:
                continue
    return out


def read_netstat(path: Path = Path("/proc/net/netstat")) -> dict[str, dict[str, int]]:
    return parse_proc_pairs(Path(path).read_text())


def stat_fields(pid: int, proc: Path = Path("/proc")) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the ")" of the command name (state first,
    field 3 of proc(5)), or None once the process is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    return stat.rsplit(")", 1)[1].split()


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) process `pid` has used so far; 0.0 once it
    is gone (a process that exited used what it used, and is no longer ours to count)."""
    fields = stat_fields(pid)
    # utime and stime are fields 14 and 15 of proc(5).
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_running(pid: int) -> bool:
    """Whether process `pid` still runs (exists and is not a zombie waiting to be reaped)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def child_stats(pid: int, proc: Path = Path("/proc")) -> dict[int, list[str]]:
    """The live children of process `pid` (field 4 of `/proc/<child>/stat`), each with its
    `stat_fields`."""
    out = {}
    for entry in os.scandir(proc):
        fields = stat_fields(int(entry.name), proc) if entry.name.isdigit() else None
        if fields is not None and int(fields[1]) == pid:
            out[int(entry.name)] = fields
    return out


def child_pids(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The live children of process `pid`."""
    return list(child_stats(pid, proc))


def sched_snapshot(pids: Sequence[int], proc: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """For every thread of processes `pids`, the kernel's scheduler statistics
    (`/proc/<pid>/task/<tid>/schedstat`): nanoseconds on the CPU, nanoseconds runnable but
    waiting for it, and the number of times it was given the CPU. Gone processes are left out."""
    out: dict[int, tuple[int, int, int]] = {}
    for pid in pids:
        try:
            tasks = os.listdir(proc / str(pid) / "task")
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            continue
        for tid in tasks:
            try:
                text = (proc / str(pid) / "task" / tid / "schedstat").read_text()
                run_ns, wait_ns, slices = text.split()[:3]
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            out[int(tid)] = (int(run_ns), int(wait_ns), int(slices))
    return out


def sched_delta(before: dict[int, tuple[int, int, int]], after: dict[int, tuple[int, int, int]]) -> dict:
    """What the threads present in both snapshots did between them: seconds on the CPU,
    seconds waiting for it while runnable, times given it, and the mean wait each time."""
    tids = before.keys() & after.keys()
    run_ns, wait_ns, slices = (sum(after[t][i] - before[t][i] for t in tids) for i in range(3))
    return {
        "threads": len(tids),
        "run_s": run_ns / 1e9,
        "wait_s": wait_ns / 1e9,
        "slices": slices,
        "wait_us_per_slice": wait_ns / 1e3 / slices if slices else None,
    }


def process_rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` in bytes (`/proc/<pid>/statm`); 0 once it is gone."""
    try:
        statm = Path(f"/proc/{pid}/statm").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- Prometheus text ---------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels (unescaped) and value. `key` is the series as
    written (``name{labels}``), for looking a series up the way it is printed."""

    name: str
    labels: dict[str, str]
    value: float
    key: str


def parse_prometheus(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, in order. Comments (``# HELP``,
    ``# TYPE``) and blank lines are skipped; values may be ``NaN``, ``+Inf``, ``-Inf``; an
    optional timestamp is ignored. A line that is not a sample raises KitError naming it."""
    out: list[Sample] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise KitError(f"Prometheus text line {n}: not a sample: {raw!r}")
        labels: dict[str, str] = {}
        body = m.group(3) or ""
        pos = 0
        while body[pos:].strip():
            lm = _LABEL.match(body, pos)
            if not lm or lm.end() == pos:
                raise KitError(f"Prometheus text line {n}: bad labels: {raw!r}")
            labels[lm.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], lm.group(2))
            pos = lm.end()
        try:
            value = float(m.group(4))
        except ValueError:
            raise KitError(f"Prometheus text line {n}: bad value: {raw!r}") from None
        out.append(Sample(m.group(1), labels, value, m.group(1) + (m.group(2) or "")))
    return out


def prometheus_series(text: str) -> dict[str, float]:
    """Every sample as ``{"name{labels}": value}``, the series as written."""
    return {s.key: s.value for s in parse_prometheus(text)}


def fetch_text(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


# -- benchmarks on a shared machine ------------------------------------------------------

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
def halt_poll_ns(value: int | None) -> Iterator[int | None]:
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


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def to_toml(doc: dict[str, Any]) -> str:
    """Serialise a two-level document of tables of scalars, lists and inline tables (the experiment
    schema; deeper levels, as in `[setups]`, become inline tables); top-level values (a gatekeeper
    experiment's `backend`) come first."""
    out = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    out += [""] if out else []
    for section, table in ((k, v) for k, v in doc.items() if isinstance(v, dict)):
        out.append(f"[{section}]")
        out.extend(f"{k} = {_toml_value(v)}" for k, v in table.items())
        out.append("")
    return "\n".join(out)


#: wrk's latency units in milliseconds.
_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def parse_wrk(text: str) -> dict[str, Any]:
    """wrk's report (run with --latency): requests/s, the latency percentiles in ms, the
    request count, non-2xx/3xx responses and socket errors. Unparseable: a KitError."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not rps:
        raise KitError(f"cannot parse wrk output:\n{text}")
    latency = {}
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M):
        latency[f"p{pct}"] = round(float(value) * _WRK_UNITS[unit], 4)
    requests = re.search(r"(\d+) requests in", text)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "requests_per_s": float(rps.group(1)),
        "latency_ms": latency,
        "requests": int(requests.group(1)) if requests else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
    }


def wrk(url: str, threads: int, connections: int, duration_s: float) -> dict[str, Any]:
    """One wrk run (closed loops, `connections` kept-alive connections) against `url`:
    `parse_wrk`'s figures. A failed run is a KitError."""
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s", "--latency", url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 60, check=False)
    if out.returncode != 0:
        raise KitError(f"{' '.join(argv)} failed: {out.stderr.strip()[-500:]}")
    return parse_wrk(out.stdout)


def self_signed_cert(
    directory: Path, dns: Sequence[str] = ("localhost",), ips: Sequence[str] = ("127.0.0.1",)
) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for the names `dns` and addresses `ips`, and its
    key (PKCS#8 PEM): `directory`/cert.pem and key.pem, made by openssl (Debian's) unless
    both are there already. A failure is a KitError with openssl's message."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    if cert.exists() and key.exists():
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    names = ",".join([*(f"DNS:{n}" for n in dns), *(f"IP:{a}" for a in ips)])
    argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    argv += ["-keyout", str(key), "-out", str(cert), "-days", "3650", "-subj", f"/CN={(dns or ips)[0]}"]
    argv += ["-addext", f"subjectAltName={names}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise KitError(f"openssl could not make a certificate in {directory}: {out.stderr.strip()[-500:]}")
    return cert, key


def parse_h2load(text: str) -> dict[str, Any]:
    """h2load's report (nghttp2's load generator, HTTP/1.1 or HTTP/2, TLS or not): the
    measured time, requests/s, the request counts (started, done, succeeded, failed,
    errored, timed out), 2xx responses, the bytes received (total, headers, data; h2load
    counts a response's bytes as they arrive, so a response still in flight at the end
    counts its bytes so far), the TLS protocol and cipher and the application protocol.
    Unparseable: a KitError."""
    finished = re.search(r"^finished in ([\d.]+)(ms|s), ([\d.]+) req/s", text, re.M)
    requests = re.search(
        r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        text,
        re.M,
    )
    traffic = re.search(
        r"^traffic: \S+ \((\d+)\) total, \S+ \((\d+)\) headers .*, \S+ \((\d+)\) data", text, re.M
    )
    codes = re.search(r"^status codes: (\d+) 2xx", text, re.M)
    if not (finished and requests and traffic and codes):
        raise KitError(f"cannot parse h2load output:\n{text[-2000:]}")
    # In timing mode (-D) "finished in" counts the warm-up too; the rates and the traffic
    # total count only the main duration (the data count includes the warm-up's).
    timing = re.search(r"Timing-based test with [\d.]+s of warm-up time and ([\d.]+)s of main duration", text)
    duration_s = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
    duration_s = float(timing.group(1)) if timing else duration_s
    names = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")
    counts = dict(zip(names, (int(x) for x in requests.groups()), strict=True))
    total_bytes, header_bytes, data_bytes = (int(x) for x in traffic.groups())

    def field(name: str) -> str | None:
        m = re.search(rf"^{name}: (.+)$", text, re.M)
        return m.group(1).strip() if m else None

    return {
        "duration_s": duration_s,
        "requests_per_s": float(finished.group(3)),
        "requests": counts,
        "status_2xx": int(codes.group(1)),
        "bytes": {"total": total_bytes, "headers": header_bytes, "data": data_bytes},
        "bytes_per_s": round(total_bytes / duration_s, 1) if duration_s > 0 else 0.0,
        "tls_protocol": field("TLS Protocol"),
        "cipher": field("Cipher"),
        "application_protocol": field("Application protocol"),
    }
