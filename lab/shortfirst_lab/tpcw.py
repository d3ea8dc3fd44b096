"""Gatekeeper on the TPC-W bookstore (issue 6): emulated browsers → (gatekeeper) → bookstore → PostgreSQL.

Everything runs on loopback: a private PostgreSQL started by ``examples/bookstore/pg.sh`` (stopped and
deleted by its watchdog when this process exits), the ``bookstore`` application server, optionally
``shortfirst gatekeeper`` in front of it, and ``shortfirst load`` in the closed model walking the TPC-W
shopping mix (``examples/bookstore/tpcw-shopping.toml``) on persistent connections.

``run_point`` measures one (mode, browsers) point; ``sweep`` runs an experiment file
(``lab/experiments/gatekeeper-tpcw.toml``) and writes ``summary.json`` with, per (mode, browsers):
``throughput_per_min``, ``mean_response_s``, ``p99_response_s`` and per interaction ``mean_wait_s``,
``mean_exec_s`` and ``mean_response_s`` over the same successful requests (``join_requests``: the
browsers' log joined with the bookstore's request log; exec = the bookstore's handler time plus the
browser's read after its first byte, wait = the rest), with the gatekeeper's own per-type histograms alongside
(``gate_mean_wait_s``, ``gate_mean_exec_s``) and, under ``joined.given_up``, what became of the requests
whose browser gave up. Every gatekeeper point also samples the learned costs once a second
(``timeline.csv`` in the point's directory).

Usage::

    python -m shortfirst_lab.tpcw sweep lab/experiments/gatekeeper-tpcw.toml --out results/gatekeeper-tpcw
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PG_SH = REPO / "examples" / "bookstore" / "pg.sh"
SESSION_FILE = REPO / "examples" / "bookstore" / "tpcw-shopping.toml"

#: Page code → (path, interaction name), as served by the bookstore (``bookstore routes``).
PAGES: dict[str, tuple[str, str]] = {
    "HOME": ("/home", "Home"),
    "NEWP": ("/new_products", "New Products"),
    "BESS": ("/best_sellers", "Best Sellers"),
    "PROD": ("/product_detail", "Product Detail"),
    "SREQ": ("/search_request", "Search Request"),
    "SRES": ("/search_results", "Search Results"),
    "SHOP": ("/shopping_cart", "Shopping Cart"),
    "CREG": ("/customer_registration", "Customer Registration"),
    "BUYR": ("/buy_request", "Buy Request"),
    "BUYC": ("/buy_confirm", "Buy Confirm"),
    "ORDI": ("/order_inquiry", "Order Inquiry"),
    "ORDD": ("/order_display", "Order Display"),
    "ADMR": ("/admin_request", "Admin Request"),
    "ADMC": ("/admin_confirm", "Admin Confirm"),
}
PATH_TO_CODE = {path: code for code, (path, _) in PAGES.items()}

#: Request mix for ``shortfirst gatekeeper calibrate``: the shopping mix's page frequencies
#: (the Gatekeeper paper's Table 1 column, percent; Customer Registration from the mix's flow).
CALIBRATION_MIX = {
    "HOME": 16.0,
    "NEWP": 5.0,
    "BESS": 5.0,
    "PROD": 17.0,
    "SREQ": 20.0,
    "SRES": 17.0,
    "SHOP": 11.6,
    "CREG": 3.0,
    "BUYR": 2.6,
    "BUYC": 1.2,
    "ORDI": 0.75,
    "ORDD": 0.66,
    "ADMR": 0.1,
    "ADMC": 0.09,
}


class TpcwError(RuntimeError):
    """A component failed to start or a run produced no usable result."""


@dataclass
class Binaries:
    shortfirst: Path
    bookstore: Path

    @classmethod
    def default(cls, profile: str = "release") -> Binaries:
        return cls(REPO / "target" / profile / "shortfirst", REPO / "target" / profile / "bookstore")

    def check(self) -> None:
        for b in (self.shortfirst, self.bookstore):
            if not b.exists():
                raise TpcwError(f"{b} not built (make build bookstore-build)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise TpcwError(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except OSError:
            time.sleep(0.1)
    raise TpcwError(f"{url} not answering after {timeout_s} s")


@contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """Runs ``args`` with output to ``log``; stops exactly this process (SIGTERM, then SIGKILL) on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield p
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@dataclass(frozen=True)
class PgSettings:
    """How the experiment's PostgreSQL runs (the experiment file's ``[postgres]`` table).

    ``memory_limit_mb`` puts the postmaster (hence every backend) in its own cgroup-v1 memory group
    with that limit, set after the data is generated: shared buffers, the backends' private memory
    and the page cache of the database files all count against it, so that many concurrent backends
    squeeze the cache and reads go to disk — the memory pressure behind the paper's collapse of
    direct access (its Table 2). ``read_iops_limit`` caps the server's reads from its disk (a blkio
    group of the same name), for a disk as slow as the paper's era when the machine's is not. Both
    need root; ``None`` runs without groups."""

    shared_buffers: str = "256MB"
    work_mem: str = "8MB"
    memory_limit_mb: int | None = None
    read_iops_limit: int | None = None

    @property
    def needs_groups(self) -> bool:
        return self.memory_limit_mb is not None or self.read_iops_limit is not None

    @classmethod
    def from_config(cls, table: dict) -> PgSettings:
        known = {"shared_buffers", "work_mem", "memory_limit_mb", "read_iops_limit"}
        unknown = set(table) - known
        if unknown:
            raise TpcwError(f"[postgres]: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        for key in ("memory_limit_mb", "read_iops_limit"):
            v = table.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise TpcwError(f"[postgres] {key} must be a positive integer, got {v!r}")
        return cls(
            str(table.get("shared_buffers", cls.shared_buffers)),
            str(table.get("work_mem", cls.work_mem)),
            table.get("memory_limit_mb"),
            table.get("read_iops_limit"),
        )


@dataclass
class Postgres:
    """A running private PostgreSQL: its URL, directory and memory group (if any)."""

    url: str
    dir: Path
    cgroup: Path | None = None

    def set_memory_limit(self, mb: int) -> None:
        self._pg_sh("memory-limit", mb)

    def set_read_iops_limit(self, reads_per_s: int) -> None:
        self._pg_sh("read-iops-limit", reads_per_s)

    def _pg_sh(self, cmd: str, value: int) -> None:
        out = subprocess.run(
            [str(PG_SH), cmd, str(self.dir), str(value)], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise TpcwError(f"pg.sh {cmd} failed: {out.stderr.strip()}")

    @property
    def blkio(self) -> Path | None:
        f = self.dir / "cgroup-blkio"
        return Path(f.read_text().strip()) if f.exists() else None

    def snapshot(self) -> dict:
        """Counters read before and after a point (their difference is the point's ``postgres``
        record): the memory group's usage and reclaim counters, the database's block reads (misses
        in shared buffers, served by the page cache or the disk) and temp-file bytes, and the
        machine's disk reads."""
        snap: dict = {"disk_read_bytes": disk_read_bytes()}
        if self.cgroup is not None:
            stat = dict(parse_kv(self.cgroup / "memory.stat"))
            snap["mem"] = {
                k: stat.get(k)
                for k in ("total_cache", "total_rss", "total_shmem", "total_pgmajfault", "total_pgpgin")
            }
            snap["mem"]["failcnt"] = int((self.cgroup / "memory.failcnt").read_text())
            snap["mem"]["max_usage_bytes"] = int((self.cgroup / "memory.max_usage_in_bytes").read_text())
            snap["mem"]["limit_bytes"] = int((self.cgroup / "memory.limit_in_bytes").read_text())
            snap["mem"]["oom_kill"] = dict(parse_kv(self.cgroup / "memory.oom_control")).get("oom_kill")
        blkio = self.blkio
        if blkio is not None:
            # Reads the server itself issued to its disks (all devices), past the page cache.
            snap["io"] = {
                "reads": blkio_reads(blkio / "blkio.throttle.io_serviced"),
                "read_bytes": blkio_reads(blkio / "blkio.throttle.io_service_bytes"),
            }
        cols = ("blks_read", "blks_hit", "temp_bytes", "xact_commit", "xact_rollback", "deadlocks")
        q = f"SELECT {', '.join(cols)} FROM pg_stat_database WHERE datname = current_database()"
        out = subprocess.run(
            [str(pg_bin() / "psql"), self.url, "-tAF,", "-c", q], capture_output=True, text=True, check=False
        )
        if out.returncode == 0 and out.stdout.strip():
            vals = [int(v) for v in out.stdout.strip().split(",")]
            snap["db"] = dict(zip(cols, vals, strict=True))
        return snap

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Waits until the server accepts connections: after a backend is killed (the memory group's
        OOM killer) PostgreSQL restarts every session and runs crash recovery first."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = subprocess.run(
                [str(pg_bin() / "pg_isready"), "-d", self.url, "-t", "5"], capture_output=True, check=False
            )
            if out.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TpcwError(f"PostgreSQL in {self.dir} not accepting connections after {timeout_s} s")
            time.sleep(0.5)

    def prewarm(self, read_iops_limit: int | None) -> float:
        """Reads every table and index of the database into the page cache, by a backend, so the
        pages are charged to the server's memory group (as far as its limit lets them stay), with
        the read limit lifted meanwhile. Every point starts from the same warm cache rather than
        from what the point before left (direct access at high load empties it). Returns seconds."""
        t0 = time.monotonic()
        if read_iops_limit is not None:
            self.set_read_iops_limit(0)
        try:
            q = (
                "CREATE EXTENSION IF NOT EXISTS pg_prewarm; "
                "SELECT sum(pg_prewarm(c.oid, 'read')) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
            )
            out = subprocess.run(
                [str(pg_bin() / "psql"), self.url, "-v", "ON_ERROR_STOP=1", "-tAqc", q],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise TpcwError(f"prewarming the database failed: {out.stderr.strip()}")
        finally:
            if read_iops_limit is not None:
                self.set_read_iops_limit(read_iops_limit)
        return time.monotonic() - t0

    def reset_peak(self) -> None:
        if self.cgroup is not None:
            (self.cgroup / "memory.max_usage_in_bytes").write_text("0")


def pg_bin() -> Path:
    for v in (17, 16, 15):
        d = Path(f"/usr/lib/postgresql/{v}/bin")
        if (d / "psql").exists():
            return d
    raise TpcwError("PostgreSQL binaries not found in /usr/lib/postgresql/{17,16,15}/bin")


def parse_kv(path: Path) -> Iterator[tuple[str, int]]:
    """``name value`` lines (cgroup memory.stat, memory.oom_control) as (name, int)."""
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            yield parts[0], int(parts[1])


def blkio_reads(path: Path) -> int:
    """The ``Read`` total of a cgroup-v1 blkio counter file (lines ``MAJ:MIN Read N``)."""
    total = 0
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "Read":
            total += int(parts[2])
    return total


def disk_read_bytes() -> int:
    """Bytes read from whole disks since boot (``/proc/diskstats``, 512-byte sectors; partitions,
    loop and ram devices skipped). Machine-wide: other work on the machine counts too."""
    total = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        name = f[2]
        if name.startswith(("loop", "ram", "zram", "dm-")) or not Path(f"/sys/block/{name}").exists():
            continue
        total += int(f[5]) * 512
    return total


def cpu_times(cpus: list[int], stat: Path = Path("/proc/stat")) -> dict[int, dict[str, float]]:
    """Seconds each of ``cpus`` spent busy (user, nice, system, irq, softirq), idle (idle, iowait)
    and stolen by the host, from ``/proc/stat``. A point's difference shows whether the host took
    the CPU the experiment ran on: a throughput dip with steal is the host's, not the policy's."""
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    out: dict[int, dict[str, float]] = {}
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        v = [int(f) for f in fields[:8]] + [0] * (8 - len(fields[:8]))
        user, nice, system, idle, iowait, irq, softirq, steal = v
        out[int(name[3:])] = {
            "busy_s": (user + nice + system + irq + softirq) * tick_s,
            "idle_s": (idle + iowait) * tick_s,
            "steal_s": steal * tick_s,
        }
    return out


def cpu_delta(before: dict[int, dict[str, float]], after: dict[int, dict[str, float]]) -> dict:
    """Per CPU, what a point used: ``after - before`` of ``cpu_times``, and the largest steal."""
    per = {str(c): {k: round(after[c][k] - before[c][k], 3) for k in after[c]} for c in after if c in before}
    return {"per_cpu": per, "max_steal_s": max((v["steal_s"] for v in per.values()), default=None)}


def snapshot_delta(before: dict, after: dict) -> dict:
    """What a point did: counter differences, and the memory group's gauges after it."""
    out: dict = {"disk_read_bytes": after["disk_read_bytes"] - before["disk_read_bytes"]}
    if "io" in before and "io" in after:
        out["io"] = {k: after["io"][k] - before["io"][k] for k in after["io"]}
    if "db" in before and "db" in after:
        out["db"] = {k: after["db"][k] - before["db"][k] for k in after["db"]}
        reads = out["db"]["blks_read"] + out["db"]["blks_hit"]
        out["db"]["shared_buffers_hit_ratio"] = out["db"]["blks_hit"] / reads if reads else None
    if "mem" in after:
        a, b = after["mem"], before["mem"]
        out["mem"] = {
            "cache_bytes": a["total_cache"],
            "rss_bytes": a["total_rss"],
            "shmem_bytes": a["total_shmem"],
            "max_usage_bytes": a["max_usage_bytes"],
            "limit_bytes": a["limit_bytes"],
            "failcnt": a["failcnt"] - b["failcnt"],
            "pgmajfault": (a["total_pgmajfault"] or 0) - (b["total_pgmajfault"] or 0),
            "pgpgin": (a["total_pgpgin"] or 0) - (b["total_pgpgin"] or 0),
            "oom_kill": (a["oom_kill"] or 0) - (b["oom_kill"] or 0),
        }
    return out


@contextmanager
def postgres(max_connections: int = 300, settings: PgSettings | None = None) -> Iterator[Postgres]:
    """A private PostgreSQL for the duration of the block. With ``settings.memory_limit_mb`` it runs
    in a uniquely named memory group (``shortfirst-tpcw-PID-RANDOM``), created before the postmaster
    starts and removed when the block ends, however it ends (``pg.sh stop``; the watchdog, if this
    process dies); the limit itself is set by the caller (``Postgres.set_memory_limit``), after
    loading the data."""
    settings = settings or PgSettings()
    if not PG_SH.exists():
        raise TpcwError(f"{PG_SH} missing")
    if settings.needs_groups and os.geteuid() != 0:
        raise TpcwError(
            "[postgres] memory_limit_mb and read_iops_limit need root (they create cgroup-v1 "
            "memory and blkio groups); run as root or drop the keys"
        )
    d = Path(tempfile.mkdtemp(prefix="tpcw-pg-", dir="/tmp"))
    port = free_port()
    args = [
        str(PG_SH),
        "start",
        str(d),
        "--port",
        str(port),
        "--owner-pid",
        str(os.getpid()),
        "--max-connections",
        str(max_connections),
        "--shared-buffers",
        settings.shared_buffers,
        "--work-mem",
        settings.work_mem,
    ]
    if settings.needs_groups:
        args += ["--memory-cgroup", f"shortfirst-tpcw-{os.getpid()}-{os.urandom(3).hex()}"]
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise TpcwError(f"pg.sh start failed: {out.stderr.strip()}")
        cg = d / "cgroup"
        yield Postgres(out.stdout.strip(), d, Path(cg.read_text().strip()) if cg.exists() else None)
    finally:
        subprocess.run([str(PG_SH), "stop", str(d)], capture_output=True, check=False)
        shutil.rmtree(d, ignore_errors=True)


def generate(bins: Binaries, db_url: str, items: int, customers: int, seed: int) -> None:
    out = subprocess.run(
        [
            str(bins.bookstore),
            "gen",
            "--db",
            db_url,
            "--items",
            str(items),
            "--customers",
            str(customers),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise TpcwError(f"bookstore gen failed: {out.stderr.strip()}")


@contextmanager
def bookstore(
    bins: Binaries,
    db_url: str,
    workdir: Path,
    pool: int,
    log_name: str = "bookstore.log",
    request_log: Path | None = None,
    best_sellers_repeat: int | None = None,
) -> Iterator[str]:
    """Yields the bookstore's URL. With ``request_log``, the bookstore writes one row per request
    there (``bookstore serve --request-log``); the file is complete once this context has exited.
    ``best_sellers_repeat``: runs of Best Sellers' query per request (``--best-sellers-repeat``;
    None: once, as TPC-W)."""
    port = free_port()
    args = [
        str(bins.bookstore),
        "serve",
        "--db",
        db_url,
        "--listen",
        f"127.0.0.1:{port}",
        "--pool",
        str(pool),
    ]
    if request_log is not None:
        args += ["--request-log", str(request_log)]
    if best_sellers_repeat is not None:
        args += ["--best-sellers-repeat", str(best_sellers_repeat)]
    with process(args, workdir / log_name) as p:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", proc=p)
        yield url


@contextmanager
def gatekeeper(
    bins: Binaries,
    upstream: str,
    policy: str,
    capacity: str,
    workdir: Path,
    max_queue_wait_s: float | None = None,
) -> Iterator[tuple[str, str]]:
    """Yields (proxy URL, metrics URL). ``max_queue_wait_s``: ``--max-queue-wait`` (503 after
    waiting that long for admission); ``None``: no limit."""
    port, admin = free_port(), free_port()
    args = [
        str(bins.shortfirst),
        "gatekeeper",
        "--listen",
        f"127.0.0.1:{port}",
        "--upstream",
        upstream,
        "--policy",
        policy,
        "--capacity",
        capacity,
        "--admin",
        f"127.0.0.1:{admin}",
    ]
    if max_queue_wait_s is not None:
        args += ["--max-queue-wait", f"{round(max_queue_wait_s * 1000)}ms"]
    with process(args, workdir / "gatekeeper.log") as p:
        wait_http(f"http://127.0.0.1:{admin}/metrics", proc=p)
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}/metrics"


def calibrate(
    bins: Binaries,
    upstream: str,
    workdir: Path,
    clients: int,
    measure_s: float,
    max_trials: int = 30,
    min_capacity: str = "10ms",
    max_capacity: str = "600s",
    growth: float = 2.0,
    within: float = 0.05,
    warmup_s: float = 2.0,
) -> tuple[str, dict]:
    """Runs ``shortfirst gatekeeper calibrate`` with the shopping mix; returns (capacity, record).

    Every step from ``min_capacity`` to ``max_capacity`` is measured (``--tolerance=-1``, no
    golden-section refinement): on a backend whose throughput plateaus instead of collapsing
    (PostgreSQL on this machine, see the report) the search's early stop lands on noise. The
    answer is the *smallest* capacity whose throughput is within ``within`` of the best trial —
    the paper's "capacity that gives peak throughput", and the one that keeps the most work in
    the gatekeeper's queue, where SJF can reorder it. ``min_capacity`` should not be below the
    costliest frequent interaction (Best Sellers): a request costlier than the capacity runs
    alone, which idles the database between such requests."""
    out_json = workdir / "calibration.json"
    args = [
        str(bins.shortfirst),
        "gatekeeper",
        "calibrate",
        "--upstream",
        upstream,
        "--clients",
        str(clients),
        "--measure",
        f"{measure_s}s",
        "--warmup",
        f"{warmup_s}s",
        "--out",
        str(out_json),
        "--max-trials",
        str(max_trials),
        "--min",
        min_capacity,
        "--max",
        max_capacity,
        "--growth",
        str(growth),
        "--tolerance=-1",
        "--refine-steps",
        "0",
    ]
    for code, w in CALIBRATION_MIX.items():
        args += ["--path", f"{PAGES[code][0]}:{w}"]
    res = subprocess.run(args, capture_output=True, text=True, check=False)
    (workdir / "calibrate.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise TpcwError(f"calibrate failed: {res.stderr.strip()[-500:]}")
    cal = json.loads(out_json.read_text())
    trials = cal["trials"]
    capacity_us = choose_capacity(trials, within)
    record = {
        "trials": trials,
        "best_capacity_us": cal["best_capacity_us"],
        "within": within,
        "chosen_capacity_us": capacity_us,
    }
    return f"{max(1, round(capacity_us / 1000))}ms", record


def parse_capacity_us(text: str) -> int:
    """``800ms``, ``2s``, ``500us`` or a bare number of ms → microseconds (the gatekeeper's units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise TpcwError(f"capacity {text!r}: expected e.g. 800ms, 2s or 500us")
    scale = {"us": 1, "ms": 1_000, "s": 1_000_000, None: 1_000}[m.group(2)]
    return round(float(m.group(1)) * scale)


def calibrate_with_browsers(
    measure,
    browsers: int,
    min_capacity: str,
    max_capacity: str,
    growth: float = 2.0,
    within: float = 0.05,
    duration_s: float = 40.0,
    warmup_s: float = 20.0,
    max_trials: int = 6,
) -> tuple[str, dict]:
    """Calibrates the capacity against the load the experiment runs: the experiment's own emulated
    browsers (closed model, think time, shopping mix, client timeout), ``browsers`` of them (by
    default the sweep's highest count: the gatekeeper's capacity matters past saturation),
    through a fifo gatekeeper at every capacity from ``min_capacity`` multiplying by ``growth`` up
    to ``max_capacity`` (at most ``max_trials``). ``measure(capacity, browsers, duration_s,
    warmup_s)`` runs one point and returns it. The answer is the smallest capacity whose
    successful throughput is within ``within`` of the best trial's (as ``choose_capacity``)."""
    lo, hi = parse_capacity_us(min_capacity), parse_capacity_us(max_capacity)
    if not (0 < lo <= hi) or growth <= 1.0 or max_trials < 1:
        raise TpcwError(
            "calibration: need 0 < calibrate_min <= calibrate_max, calibrate_growth > 1 and "
            f"calibrate_max_trials >= 1; got {min_capacity}, {max_capacity}, {growth}, {max_trials}"
        )
    trials = []
    cap = lo
    while cap <= hi * 1.0001 and len(trials) < max_trials:
        label = f"{max(1, round(cap / 1000))}ms"
        r = measure(label, browsers, duration_s, warmup_s)
        trials.append(
            {
                "capacity_us": parse_capacity_us(label),
                "throughput_per_s": r["throughput_per_min"] / 60.0,
                "throughput_per_min": r["throughput_per_min"],
                "full_throughput_per_min": r["full"]["throughput_per_min"],
                "timed_out": r["timed_out"],
                "mean_response_s": r["mean_response_s"],
            }
        )
        print(
            f"  calibrate {label:>8}: {r['throughput_per_min']:8.0f}/min at {browsers} browsers", flush=True
        )
        cap *= growth
    chosen = choose_capacity(trials, within)
    record = {
        "method": "browsers",
        "browsers": browsers,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "trials": trials,
        "within": within,
        "chosen_capacity_us": chosen,
    }
    return f"{max(1, round(chosen / 1000))}ms", record


def choose_capacity(trials: list[dict], within: float) -> int:
    """The smallest trial capacity whose throughput is at least (1 − within) × the best trial's."""
    if not trials:
        raise TpcwError("calibrate measured no trial")
    best = max(t["throughput_per_s"] for t in trials)
    if best <= 0:
        raise TpcwError("calibrate: no trial completed a request")
    return min(t["capacity_us"] for t in trials if t["throughput_per_s"] >= (1.0 - within) * best)


def run_load(
    bins: Binaries,
    target: str,
    out: Path,
    browsers: int,
    think: str,
    duration_s: float,
    seed: int,
    timeout_s: float = 120.0,
) -> dict:
    args = [
        str(bins.shortfirst),
        "load",
        "--target",
        target,
        "--session",
        str(SESSION_FILE),
        "--model",
        f"closed:{browsers},think={think}",
        "--duration",
        str(duration_s),
        "--persistent",
        "100000",
        "--timeout",
        str(timeout_s),
        "--out",
        str(out),
        "--seed",
        str(seed),
        "--quiet",
    ]
    res = subprocess.run(args, capture_output=True, text=True, check=False)
    (out.parent / f"{out.name}.load.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0 or not (out / "summary.json").exists():
        raise TpcwError(f"shortfirst load failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return json.loads((out / "summary.json").read_text())


_TIMELINE_SERIES = re.compile(
    r"^(gatekeeper_(?:load_seconds|capacity_seconds|queue_length|in_flight|admitted_total"
    r"|cancelled_while_queued_total)|gatekeeper_type_estimated_cost_seconds)"
    r"(?:\{type=\"((?:[^\"\\]|\\.)*)\"\})?\s+(\S+)$"
)


class Timeline:
    """Samples the gatekeeper's gauges and per-type learned costs once a second while a point runs
    (a background thread; one small HTTP request a second to the admin port). The learned cost of
    a type over time is what SJF orders by; the end-of-run value alone is the drained tail's.

    At most ``max_samples`` samples are kept (later ones are dropped); ``write`` writes
    ``t_s,series,type,value`` rows, ``t_s`` from the start of sampling."""

    def __init__(self, metrics_url: str, interval_s: float = 1.0, max_samples: int = 3600) -> None:
        import threading

        self.url, self.interval_s, self.max_samples = metrics_url, interval_s, max_samples
        self.rows: list[tuple[float, str, str, float]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gatekeeper-timeline", daemon=True)

    def __enter__(self) -> Timeline:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set() and self.samples < self.max_samples:
            t = time.monotonic() - self._t0
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            for line in text.splitlines():
                m = _TIMELINE_SERIES.match(line)
                if m:
                    self.rows.append((t, m.group(1), m.group(2) or "", float(m.group(3))))
            self.samples += 1
            self._stop.wait(self.interval_s)

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s", "series", "type", "value"])
            w.writerows((f"{t:.3f}", series, label, value) for t, series, label, value in self.rows)
        tmp.rename(path)


_METRIC = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Prometheus text → {(metric, type label): value} for the per-type series (bucket lines skipped)."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if not m or m.group(1).endswith("_bucket"):
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        if "type" in labels and "outcome" not in labels:
            out[(m.group(1), labels["type"])] = float(m.group(3))
    return out


def type_to_code(type_label: str) -> str | None:
    """``GET /best_sellers`` → ``BESS``."""
    path = type_label.split(" ", 1)[-1].split("?", 1)[0]
    return PATH_TO_CODE.get(path)


def _summarize(rts: list[float], window_s: float) -> dict:
    rts = sorted(rts)
    return {
        "completed": len(rts),
        "throughput_per_min": len(rts) / window_s * 60.0,
        "mean_response_s": sum(rts) / len(rts) if rts else math.nan,
        "p99_response_s": rts[min(len(rts) - 1, int(0.99 * len(rts)))] if rts else math.nan,
    }


def analyze(
    requests_csv: Path,
    warmup_s: float,
    end_s: float,
    timeout_s: float = math.inf,
    browsers: int | None = None,
    think_max_s: float = 0.0,
) -> dict:
    """Throughput and response times of the requests that ended in [warmup_s, end_s], in two
    accountings, and a Little's-law check.

    - The paper's (top-level keys, Elnikety et al. §4.5): successful interactions only — a request
      that fails, gets an HTTP error or hits the client timeout (``timeout_s``) is counted in
      ``failed`` / ``timed_out`` and in neither throughput nor response time.
    - ``full``: every request that ended, whatever its outcome; a timed-out one counts with the
      time the client waited (the timeout). Requests still in flight at ``end_s`` are counted in
      ``in_flight_at_end``; they are not throughput, but the full mean response time includes
      them with the time they had waited by ``end_s`` (``mean_response_s`` is then a lower bound;
      ``mean_response_ended_s`` leaves them out). ``shortfirst load`` logs them when they end
      after the run's duration (it drains); should a log lack them, then given the number of
      ``browsers``, a browser whose last response ended more than ``think_max_s`` before the
      end (or that never got one) was waiting, for at least that time less ``think_max_s``.
    - ``little``: in a closed loop every browser is either waiting for a response or thinking, so
      N = X × (R + Z), with X the rate of ended requests, R their mean response time and Z the
      mean think time actually taken (from one request's end to the same browser's next start).
      ``n_full`` uses the full accounting and should match the number of browsers (up to the
      window's edges: requests that began before it, or are unfinished at its end);
      ``n_paper`` (successful only) falls short by the browsers' time on excluded requests.
      ``mean_waiting`` is the time-average number of browsers waiting for a response in the
      window, from the log's intervals, unfinished requests included.
    """
    per: dict[str, list[float]] = defaultdict(list)
    per_full: dict[str, list[float]] = defaultdict(list)
    per_timed_out: dict[str, int] = defaultdict(int)
    ok_rt: list[float] = []
    all_rt: list[float] = []
    censored_rt: list[float] = []
    failed = timed_out = in_flight_at_end = 0
    by_client: dict[str, list[tuple[float, float]]] = defaultdict(list)
    waiting_s = 0.0
    with open(requests_csv, newline="") as f:
        for row in csv.DictReader(f):
            done = row.get("done_s") or ""
            start_s = float(row["start_s"]) if row.get("start_s") else math.nan
            done_s = float(done) if done else math.inf
            if not math.isnan(start_s):
                waiting_s += max(0.0, min(done_s, end_s) - max(start_s, warmup_s))
            if start_s <= end_s < done_s:
                in_flight_at_end += 1
                censored_rt.append(end_s - start_s)
            if not done:
                continue
            by_client[row.get("client", "")].append((start_s, done_s))
            if not (warmup_s <= done_s <= end_s):
                continue
            rt = done_s - start_s
            code = PATH_TO_CODE.get(row["path"].split("?", 1)[0], "OTHER")
            if row["outcome"] == "timeout":
                timed_out += 1
                per_timed_out[code] += 1
            elif row["outcome"] != "ok" or row["status"] != "200":
                failed += 1
            else:
                per[code].append(rt)
                ok_rt.append(rt)
            per_full[code].append(rt)
            all_rt.append(rt)
    window_s = max(1e-9, end_s - warmup_s)
    for client in range(browsers or 0):
        reqs = by_client.get(str(client))
        last_done = max((d for _, d in reqs), default=0.0) if reqs else 0.0
        if last_done < end_s - think_max_s:
            in_flight_at_end += 1
            censored_rt.append(end_s - last_done - think_max_s)
            waiting_s += end_s - max(warmup_s, last_done + think_max_s)
    # Think time actually taken: from a request's end to the same browser's next start, for the
    # requests that ended in the window.
    thinks: list[float] = []
    for reqs in by_client.values():
        reqs.sort()
        for (_, done_a), (start_b, _) in zip(reqs, reqs[1:], strict=False):
            if warmup_s <= done_a <= end_s:
                thinks.append(max(0.0, start_b - done_a))
    think_s = sum(thinks) / len(thinks) if thinks else 0.0
    res = _summarize(ok_rt, window_s)
    full = _summarize(all_rt, window_s)
    full["mean_response_ended_s"] = full["mean_response_s"]
    if censored_rt:
        full["mean_response_s"] = (sum(all_rt) + sum(censored_rt)) / (len(all_rt) + len(censored_rt))
    full["per_interaction"] = {
        c: {"count": len(v), "mean_response_s": sum(v) / len(v), "timed_out": per_timed_out.get(c, 0)}
        for c, v in per_full.items()
    }
    browsers = browsers or len(by_client)

    def n(acc: dict) -> float | None:
        if not acc["completed"]:
            return None
        return (
            acc["throughput_per_min"]
            / 60.0
            * (acc.get("mean_response_ended_s", acc["mean_response_s"]) + think_s)
        )

    res.update(
        {
            "failed": failed,
            "timed_out": timed_out,
            "in_flight_at_end": in_flight_at_end,
            "client_timeout_s": None if math.isinf(timeout_s) else timeout_s,
            "full": full,
            "little": {
                "browsers": browsers,
                "mean_think_s": think_s,
                "n_full": n(full),
                "n_paper": n(res),
                "n_full_over_browsers": n(full) / browsers if browsers and n(full) is not None else None,
                "mean_waiting": waiting_s / window_s,
                # The mean response time Little's law implies at the measured full throughput.
                "implied_mean_response_s": browsers / (full["throughput_per_min"] / 60.0) - think_s
                if full["completed"]
                else None,
            },
            "per_interaction_response": {
                c: {"count": len(v), "mean_response_s": sum(v) / len(v)} for c, v in per.items()
            },
        }
    )
    return res


def join_requests(
    requests_csv: Path,
    started_unix_s: float,
    app_log: Path,
    warmup_s: float,
    end_s: float,
    tolerance_s: float = 0.002,
    relay_s: float = 0.050,
) -> dict:
    """Joins the browsers' log (``shortfirst load``'s requests.csv) with the bookstore's
    (``bookstore serve --request-log``), request by request, for the requests that ended in
    [warmup_s, end_s].

    Neither log carries an id of the other, so a successful browser request is matched to the
    bookstore request of the same path whose end is nearest its first response byte, after
    removing the two clocks' offset (with the typical relay time: the most common gap): at most
    ``relay_s`` before it or ``tolerance_s`` after it, and that began after the browser sent it.
    Its time splits into ``exec`` (the bookstore's handler time, measured on its own clock, plus
    the browser's read from first to last byte) and ``wait`` (the rest: connection, proxy,
    admission queue, and the relay back to the browser, typically well under a millisecond), so
    ``wait + exec = response`` on the same requests and a matched request never has zero exec.
    A type's means do not depend on which of its requests were paired with which bookstore rows,
    only on which were matched at all.

    A browser request that timed out (``given_up``) is then matched to a still unmatched
    bookstore request of its path that began while the browser waited: work the application
    tier did for an answer nobody read. Bookstore requests left over (``unmatched_app``) began
    after their browser had given up (admitted although the client was gone), got an error, or
    were not matched.

    Returns ``matched``/``ok`` (the share of successful requests joined), per interaction
    ``count``, ``mean_wait_s``, ``mean_exec_s``, ``mean_response_s``; ``given_up`` with
    ``count``, ``reached_app``, ``dropped`` (the bookstore saw the connection close while it
    worked), ``app_s`` (their time in the bookstore's handlers), per interaction;
    ``unmatched_app`` (``count``, ``dropped``, ``app_s``); and ``app_busy_s``: the time in the
    handlers of every request the bookstore began in the window."""
    app: dict[str, list[list]] = defaultdict(list)
    with open(app_log, newline="") as f:
        for row in csv.DictReader(f):
            arrive = float(row["arrived_unix_s"]) - started_unix_s
            svc = float(row["service_s"])
            # [finish, arrive, service, outcome, used]
            app[row["path"]].append([arrive + svc, arrive, svc, row["outcome"], False])
    for rows in app.values():
        rows.sort()
    finishes = {p: [r[0] for r in rows] for p, rows in app.items()}

    ok: list[tuple[float, float, float, str]] = []  # (first byte, start, done, path)
    gave_up: list[tuple[float, float, str]] = []  # (start, done, path)
    with open(requests_csv, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("done_s"):
                continue
            start, done = float(row["start_s"]), float(row["done_s"])
            path = row["path"].split("?", 1)[0]
            # Matched over the whole log, so that requests outside the window take their own
            # bookstore rows; reported for the window only.
            if row["outcome"] == "ok" and row["status"] == "200" and row.get("first_byte_s"):
                ok.append((float(row["first_byte_s"]), start, done, path))
            elif row["outcome"] == "timeout":
                gave_up.append((start, done, path))

    import bisect

    # The clocks' offset: the most common gap between a browser's first byte and any bookstore
    # end of the same path within 0.1 s (0.25 ms bins). Pairs of different requests spread evenly
    # over the gaps; the true pairs pile up at one gap (offset + relay). The nearest end alone
    # would not do: with dense requests, nearest-neighbour gaps pile up at zero.
    bins: dict[int, int] = defaultdict(int)
    pair_gaps: list[float] = []
    for fb, _, _, path in ok:
        fs = finishes.get(path, [])
        for j in range(bisect.bisect_left(fs, fb - 0.1), len(fs)):
            if fs[j] > fb + 0.1:
                break
            g = fb - fs[j]
            bins[math.floor(g / 0.00025)] += 1
            pair_gaps.append(g)
    offset = 0.0
    if bins:
        peak = (max(bins, key=lambda k: (bins[k], -k)) + 0.5) * 0.00025
        near = sorted(g for g in pair_gaps if abs(g - peak) <= 0.0005)
        offset = near[len(near) // 2]

    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    matched = 0
    for fb, start, done, path in sorted(ok):
        fs, rows = finishes.get(path), app.get(path)
        if not fs:
            continue
        t = fb - offset
        # The bookstore's end precedes the first byte by the relay: at most relay_s more than the
        # typical relay, and no more than a bin's width less.
        lo = bisect.bisect_left(fs, t - relay_s)
        best = None
        for j in range(lo, len(fs)):
            if fs[j] > t + tolerance_s:
                break
            r = rows[j]
            if r[4] or r[3] != "done" or r[1] + offset < start - tolerance_s:
                continue
            if best is None or abs(fs[j] - t) < abs(fs[best] - t):
                best = j
        if best is None:
            continue
        rows[best][4] = True
        if not (warmup_s <= done <= end_s):
            continue
        matched += 1
        # exec is the bookstore's own handler time (one clock, no offset in it) plus the browser's
        # read after its first byte; wait is the rest. Taking the bookstore's start through the
        # estimated offset instead let a cheap page whose relay was shorter than the typical one
        # look as if it started after the browser's last byte: exec clamped to 0.
        response = done - start
        exec_s = min(response, rows[best][2] + max(0.0, done - fb))
        per[PATH_TO_CODE.get(path, "OTHER")].append((response - exec_s, response))
    ok_in_window = sum(warmup_s <= done <= end_s for _, _, done, _ in ok)

    g_per: dict[str, dict] = defaultdict(lambda: {"count": 0, "reached_app": 0, "app_s": 0.0, "wait_s": []})
    reached = dropped = 0
    n_gave_up = sum(warmup_s <= done <= end_s for _, done, _ in gave_up)
    app_s = 0.0
    # A given-up request reached the bookstore if a still unmatched bookstore request of its path
    # began while its browser waited (between its send and its timeout), earliest deadline first.
    for start, done, path in sorted(gave_up, key=lambda g: g[1]):
        rows = app.get(path, [])
        cands = [r for r in rows if not r[4] and start - tolerance_s <= r[1] + offset <= done + tolerance_s]
        r = min(cands, key=lambda r: r[1]) if cands else None
        if r is not None:
            r[4] = True
        if not (warmup_s <= done <= end_s):
            continue
        e = g_per[PATH_TO_CODE.get(path, "OTHER")]
        e["count"] += 1
        if r is None:
            continue
        reached += 1
        e["reached_app"] += 1
        e["app_s"] += r[2]
        e["wait_s"].append(r[1] + offset - start)
        app_s += r[2]
        dropped += r[3] == "dropped"
    # Bookstore requests begun in the window that no browser request accounts for: begun after
    # their browser had given up (admitted although the client was gone), answered with an error,
    # or not matched (about ok - matched of them).
    unmatched = [r for rows in app.values() for r in rows if not r[4] and warmup_s <= r[1] + offset <= end_s]
    busy = sum(r[2] for rows in app.values() for r in rows if warmup_s <= r[1] + offset <= end_s)
    return {
        "ok": ok_in_window,
        "matched": matched,
        "clock_offset_s": offset,
        "per_interaction": {
            c: {
                "count": len(v),
                "mean_wait_s": sum(w for w, _ in v) / len(v),
                "mean_exec_s": sum(r - w for w, r in v) / len(v),
                "mean_response_s": sum(r for _, r in v) / len(v),
            }
            for c, v in per.items()
        },
        "given_up": {
            "count": n_gave_up,
            "reached_app": reached,
            "dropped": dropped,
            "app_s": app_s,
            "per_interaction": {
                c: {
                    "count": e["count"],
                    "reached_app": e["reached_app"],
                    "app_s": e["app_s"],
                    "mean_wait_s": sum(e["wait_s"]) / len(e["wait_s"]) if e["wait_s"] else None,
                }
                for c, e in g_per.items()
            },
        },
        "unmatched_app": {
            "count": len(unmatched),
            "dropped": sum(r[3] == "dropped" for r in unmatched),
            "app_s": sum(r[2] for r in unmatched),
        },
        "app_busy_s": busy,
    }


def timeline_stats(path: Path, from_s: float = 0.0) -> dict:
    """From a point's ``timeline.csv``, samples from ``from_s`` on (e.g. after the warm-up: before a
    type's first sample its charge is the costliest type's): the samples taken and, per request
    type, its largest learned cost, the seconds during which it was at or above the capacity, and
    the longest span during which its learned cost did not change (``longest_unchanged_s``: no
    sample completed then). Under the paper's rule a type at or above the capacity runs only when
    nothing else is admitted (``Gate``: "Empty system"), and under SJF any type priced behind the
    work that fills the gate is not admitted at all: it yields no new cost samples and its
    estimate stays where it is, unless the estimator re-samples it (core::admission,
    "Re-sampling": a probe every ``resample_after``, 5 s by default)."""
    by_t: dict[float, dict[str, float]] = defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = row["type"] or row["series"]
            if float(row["t_s"]) >= from_s:
                by_t[float(row["t_s"])][key] = float(row["value"])
    times = sorted(by_t)
    step = {t: (b - t) for t, b in zip(times, times[1:], strict=False)}
    at_capacity: dict[str, float] = defaultdict(float)
    max_cost: dict[str, float] = {}
    # Per type: (value, time it took that value) of the current run, and the longest run so far.
    run: dict[str, tuple[float, float]] = {}
    unchanged: dict[str, float] = {}
    for t in times:
        sample = by_t[t]
        cap = sample.get("gatekeeper_capacity_seconds")
        for key, value in sample.items():
            if key.startswith("gatekeeper_") or key == "(other)":
                continue
            max_cost[key] = max(max_cost.get(key, 0.0), value)
            if cap and value >= cap and t in step:
                at_capacity[key] += step[t]
            if key not in run or run[key][0] != value:
                run[key] = (value, t)
            unchanged[key] = max(unchanged.get(key, 0.0), t - run[key][1])
    return {
        "samples": len(times),
        "max_cost_s": max_cost,
        "at_or_above_capacity_s": dict(at_capacity),
        "longest_unchanged_s": unchanged,
    }


def apply_join(point: dict, joined: dict) -> None:
    """Replaces a point's per-interaction ``mean_wait_s`` / ``mean_exec_s`` / ``mean_response_s``
    with the joined figures (the same successful requests for all three), keeping the gatekeeper's
    own per-type means as ``gate_mean_wait_s`` / ``gate_mean_exec_s`` (every admitted request of
    the whole run, given-up ones included), and stores the rest of the join under ``joined``."""
    per = point.setdefault("per_interaction", {})
    for e in per.values():
        for key in ("mean_wait_s", "mean_exec_s"):
            if key in e and "gatekeeper_cancelled_while_queued" in point:
                e[f"gate_{key}"] = e[key]
            e.pop(key, None)
    for code, j in joined["per_interaction"].items():
        e = per.setdefault(code, {})
        e.update(
            {
                "joined_count": j["count"],
                "mean_wait_s": j["mean_wait_s"],
                "mean_exec_s": j["mean_exec_s"],
                "mean_response_s": j["mean_response_s"],
            }
        )
    point["joined"] = {k: v for k, v in joined.items() if k != "per_interaction"}


@dataclass
class Point:
    mode: str
    browsers: int
    result: dict = field(default_factory=dict)


def run_point(
    bins: Binaries,
    app_url: str,
    mode: str,
    capacity: str,
    browsers: int,
    think: str,
    duration_s: float,
    warmup_s: float,
    seed: int,
    workdir: Path,
    timeout_s: float = 120.0,
    pg: Postgres | None = None,
    name: str | None = None,
    max_queue_wait_s: float | None = None,
) -> dict:
    """One measurement: ``mode`` is ``direct`` or a gatekeeper policy (``fifo``, ``sjf``, ``sjf-aging:X``),
    optionally with its own capacity after ``@`` (``sjf@auto``) instead of ``capacity``. Its logs go to
    ``workdir/name`` (default: from the mode and the browsers)."""
    policy, _, own_capacity = mode.partition("@")
    capacity = own_capacity or capacity
    name = name or f"{mode.replace(':', '-').replace('@', '-')}-{browsers}"
    out = workdir / name
    if out.exists():
        shutil.rmtree(out)
    metrics: dict[tuple[str, str], float] = {}
    if pg is not None:
        pg.reset_peak()
        before = pg.snapshot()
    cpus = sorted(os.sched_getaffinity(0))
    cpu_before = cpu_times(cpus)
    if mode == "direct":
        summary = run_load(bins, app_url, out, browsers, think, duration_s, seed, timeout_s)
    else:
        with gatekeeper(bins, app_url, policy, capacity, workdir / name, max_queue_wait_s) as (
            proxy,
            metrics_url,
        ):
            with Timeline(metrics_url) as timeline:
                summary = run_load(bins, proxy, out, browsers, think, duration_s, seed, timeout_s)
            timeline.write(out / "timeline.csv")
            with urllib.request.urlopen(metrics_url, timeout=10) as r:
                text = r.read().decode()
            (out / "metrics.txt").write_text(text)
            metrics = parse_metrics(text)
            # Requests whose client went away (e.g. its timeout) while they waited for admission.
            cancelled = re.search(r"^gatekeeper_cancelled_while_queued_total\s+(\S+)$", text, re.M)
    cpu = cpu_delta(cpu_before, cpu_times(cpus))
    res = analyze(out / "requests.csv", warmup_s, duration_s, timeout_s, browsers, think_max_s(think))
    res["cpu"] = cpu
    res["load_summary_valid"] = summary.get("valid")
    res["load_started_unix_s"] = summary.get("started_unix_s")
    if mode != "direct":
        res["gatekeeper_cancelled_while_queued"] = float(cancelled.group(1)) if cancelled else None
    if pg is not None:
        res["postgres"] = snapshot_delta(before, pg.snapshot())
    per = {}
    for code, stats in res.pop("per_interaction_response").items():
        entry = {"count": stats["count"], "mean_response_s": stats["mean_response_s"]}
        if mode == "direct":
            entry["mean_wait_s"] = 0.0
            entry["mean_exec_s"] = stats["mean_response_s"]
        per[code] = entry
    # Gatekeeper: split wait/exec and report the learned cost, per type (whole run, incl. warm-up).
    for (metric, label), value in metrics.items():
        code = type_to_code(label)
        if code is None:
            continue
        e = per.setdefault(code, {})
        if metric == "gatekeeper_type_estimated_cost_seconds":
            e["learned_cost_s"] = value
        for prefix, key in (
            ("gatekeeper_type_queue_wait_seconds", "mean_wait_s"),
            ("gatekeeper_type_upstream_seconds", "mean_exec_s"),
        ):
            if metric == prefix + "_sum":
                e[f"_{key}_sum"] = value
            if metric == prefix + "_count":
                e[f"_{key}_count"] = value
    for e in per.values():
        for key in ("mean_wait_s", "mean_exec_s"):
            s, n = e.pop(f"_{key}_sum", None), e.pop(f"_{key}_count", None)
            if s is not None and n:
                e[key] = s / n
    res["per_interaction"] = per
    return res


def think_max_s(think: str) -> float:
    """The longest think time of a load-generator distribution: ``exp:MEAN:MAX`` → MAX,
    ``const:S`` → S; otherwise unbounded (``inf``), so no browser is inferred to be waiting."""
    name, _, rest = think.partition(":")
    nums = rest.split(":")
    try:
        if name == "exp" and len(nums) == 2:
            return float(nums[1])
        if name == "const" and len(nums) == 1:
            return float(nums[0])
    except ValueError:
        pass
    return math.inf


def browsers_for(cfg: dict, mode: str) -> list[int]:
    """Load points of ``mode``: ``[modes.browsers]`` may give a mode its own list (the aging and
    auto modes are measured at fewer points to fit the time budget); otherwise ``[load] browsers``."""
    own = cfg["modes"].get("browsers", {}).get(mode)
    return [int(n) for n in (own if own is not None else cfg["load"]["browsers"])]


def environment() -> dict:
    """Where the sweep ran: CPU affinity and nice value (the sweep may be pinned with ``taskset``;
    every child — PostgreSQL, bookstore, gatekeeper, load generator — inherits them), the load
    average, the commit."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    return {
        "cpus": sorted(os.sched_getaffinity(0)),
        "online_cpus": os.cpu_count(),
        "nice": os.nice(0),
        "loadavg": list(os.getloadavg()),
        "commit": commit.stdout.strip() if commit.returncode == 0 else None,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# The bookstore's own bound (`BEST_SELLERS_REPEAT_MAX`), checked here too so that a bad value
# stops the sweep before the database is generated, naming the setting.
BEST_SELLERS_REPEAT_MAX = 100


def best_sellers_repeat_of(bookstore_cfg: dict) -> int | None:
    """``[bookstore] best_sellers_repeat`` (runs of Best Sellers' query per request, a declared
    deviation from TPC-W), validated; None if unset (once, as TPC-W)."""
    value = bookstore_cfg.get("best_sellers_repeat")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BEST_SELLERS_REPEAT_MAX:
        raise TpcwError(
            f"[bookstore] best_sellers_repeat must be an integer from 1 to {BEST_SELLERS_REPEAT_MAX}"
            f" (runs of its query per request), got {value!r}"
        )
    return value


@contextmanager
def shop(cfg: dict, bins: Binaries, doc: dict) -> Iterator[Postgres]:
    """PostgreSQL (``[postgres]``) with the generated database (``[bookstore]``). Records the
    settings, the memory group's limit and the generation time in ``doc``. The memory limit is set
    after generation, so that it shapes the experiment, not the loading; the kernel then reclaims
    the group's page cache down to it."""
    b = cfg["bookstore"]
    settings = PgSettings.from_config(cfg.get("postgres", {}))
    pool = int(b.get("pool", 128))
    t0 = time.monotonic()
    with postgres(max_connections=pool + 20, settings=settings) as pg:
        generate(bins, pg.url, b["items"], b["customers"], b.get("seed", 1))
        doc["generate_s"] = time.monotonic() - t0
        doc["postgres"] = {
            "shared_buffers": settings.shared_buffers,
            "work_mem": settings.work_mem,
            "memory_limit_mb": settings.memory_limit_mb,
            "read_iops_limit": settings.read_iops_limit,
            "max_connections": pool + 20,
            "database_bytes": database_bytes(pg.url),
        }
        if settings.memory_limit_mb is not None:
            pg.set_memory_limit(settings.memory_limit_mb)
        if settings.read_iops_limit is not None:
            pg.set_read_iops_limit(settings.read_iops_limit)
        if settings.needs_groups:
            doc["postgres"]["after_limit"] = pg.snapshot()
        yield pg


def database_bytes(url: str) -> int | None:
    out = subprocess.run(
        [str(pg_bin() / "psql"), url, "-tAc", "SELECT pg_database_size(current_database())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None


def sweep(
    config_path: Path, out_dir: Path, bins: Binaries | None = None, overrides: dict | None = None
) -> dict:
    """Runs the experiment file; writes ``out_dir/summary.json`` (temp file, then rename) after every
    point, so an interrupted sweep leaves the points measured so far.

    ``overrides`` replaces ``capacity`` (gatekeeper), ``modes`` and ``browsers`` of the file."""
    cfg = tomllib.loads(config_path.read_text())
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key == "capacity":
            cfg.setdefault("gatekeeper", {})["capacity"] = value
        elif key == "modes":
            cfg["modes"]["list"] = value
        elif key == "browsers":
            cfg["load"]["browsers"] = value
            cfg["modes"].pop("browsers", None)
        elif key in ("think", "duration_s", "warmup_s", "client_timeout_s"):
            cfg["load"][key] = value
        elif key in ("items", "customers", "best_sellers_repeat"):
            cfg["bookstore"][key] = value
        elif key == "max_queue_wait_s":
            # 0 on the command line: no limit.
            if value:
                cfg.setdefault("gatekeeper", {})[key] = value
            else:
                cfg.setdefault("gatekeeper", {}).pop(key, None)
        elif key == "calibrate_with":
            cfg.setdefault("gatekeeper", {})[key] = value
        elif key == "postgres":
            cfg.setdefault("postgres", {}).update({k: v for k, v in value.items() if v is not None})
    bins = bins or Binaries.default()
    bins.check()
    b, ld, gk = cfg["bookstore"], cfg["load"], cfg.get("gatekeeper", {})
    out_dir.mkdir(parents=True, exist_ok=True)
    # A raw load-generator think distribution (e.g. const:0 for the closed-loop exploration with a
    # fixed number in flight) replaces TPC-W's exponential one.
    think = ld.get("think") or f"exp:{ld['think_mean_s']}:{ld['think_max_s']}"
    results: list[dict] = []
    doc: dict = {
        "experiment": str(config_path),
        "config": cfg,
        "think": think,
        "think_shortening": None if ld.get("think") else 7.0 / float(ld["think_mean_s"]),
        "scale": {"items": b["items"], "customers": b["customers"]},
        "pool": int(b.get("pool", 128)),
        "environment": environment(),
        "points": results,
    }

    def save() -> None:
        doc["targets"] = targets(results)
        doc["targets_full_accounting"] = targets(full_view(results))
        tmp = out_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2, allow_nan=True) + "\n")
        tmp.rename(out_dir / "summary.json")

    t0 = time.monotonic()
    timeout_s = float(ld.get("client_timeout_s", 120.0))
    doc["client_timeout_s"] = timeout_s
    pool = int(b.get("pool", 128))
    settings = PgSettings.from_config(cfg.get("postgres", {}))
    max_queue_wait_s = gk.get("max_queue_wait_s")
    if max_queue_wait_s is not None:
        max_queue_wait_s = float(max_queue_wait_s)
        if not (0 < max_queue_wait_s):
            raise TpcwError(f"[gatekeeper] max_queue_wait_s must be positive, got {max_queue_wait_s}")
    doc["max_queue_wait_s"] = max_queue_wait_s
    best_sellers_repeat = best_sellers_repeat_of(b)
    doc["best_sellers_repeat"] = best_sellers_repeat or 1

    def measure(
        mode: str, n: int, capacity: str, duration_s: float, warmup_s: float, prefix: str = ""
    ) -> dict:
        """One point on a fresh bookstore (its pool keeps every connection it ever opened, and an
        idle PostgreSQL backend keeps its memory, so a point must not inherit the backends of the
        one before: direct at 256 browsers opens 256 of them) and a prewarmed cache."""
        name = prefix + f"{mode.replace(':', '-').replace('@', '-')}-{n}"
        pg.wait_ready()
        prewarm_s = pg.prewarm(settings.read_iops_limit)
        app_log = out_dir / f"bookstore-{name}.requests.csv"
        with bookstore(
            bins, pg.url, out_dir, pool, f"bookstore-{name}.log", app_log, best_sellers_repeat
        ) as app:
            r = run_point(
                bins,
                app,
                mode,
                capacity,
                n,
                think,
                duration_s,
                warmup_s,
                int(ld.get("seed", 1)),
                out_dir,
                timeout_s,
                pg,
                name=name,
                max_queue_wait_s=max_queue_wait_s,
            )
        started = r.pop("load_started_unix_s", None)
        if started is not None and app_log.exists():
            apply_join(
                r,
                join_requests(out_dir / name / "requests.csv", float(started), app_log, warmup_s, duration_s),
            )
        r.update({"mode": mode, "browsers": n, "loadavg": list(os.getloadavg()), "prewarm_s": prewarm_s})
        return r

    with shop(cfg, bins, doc) as pg:
        capacity = str(gk.get("capacity", "calibrate"))
        if capacity == "calibrate" and gk.get("calibrate_with", "closed-loop") == "browsers":
            capacity, doc["calibration"] = calibrate_with_browsers(
                lambda cap, n, d, w: measure(f"fifo@{cap}", n, cap, d, w, prefix="calibrate-"),
                browsers=int(
                    gk.get("calibrate_browsers", max(max(browsers_for(cfg, m)) for m in cfg["modes"]["list"]))
                ),
                min_capacity=str(gk.get("calibrate_min", "800ms")),
                max_capacity=str(gk.get("calibrate_max", "6400ms")),
                growth=float(gk.get("calibrate_growth", 2.0)),
                within=float(gk.get("calibrate_within", 0.05)),
                duration_s=float(gk.get("calibrate_browsers_duration_s", 40)),
                warmup_s=float(gk.get("calibrate_browsers_warmup_s", 20)),
                max_trials=int(gk.get("calibrate_max_trials", 6)),
            )
        elif capacity == "calibrate":
            with bookstore(
                bins, pg.url, out_dir, pool, "bookstore-calibrate.log", None, best_sellers_repeat
            ) as app:
                capacity, doc["calibration"] = calibrate(
                    bins,
                    app,
                    out_dir,
                    int(gk.get("calibrate_clients", 64)),
                    float(gk.get("calibrate_measure_s", 10)),
                    int(gk.get("calibrate_max_trials", 30)),
                    str(gk.get("calibrate_min", "10ms")),
                    str(gk.get("calibrate_max", "600s")),
                    float(gk.get("calibrate_growth", 2.0)),
                    float(gk.get("calibrate_within", 0.05)),
                    float(gk.get("calibrate_warmup_s", 2.0)),
                )
        doc["capacity"] = capacity
        print(f"capacity {capacity} (setup {time.monotonic() - t0:.0f} s)", flush=True)
        for mode in cfg["modes"]["list"]:
            for n in browsers_for(cfg, mode):
                r = measure(mode, int(n), capacity, float(ld["duration_s"]), float(ld["warmup_s"]))
                results.append(r)
                save()
                print(
                    f"{mode:>12} {n:>5} browsers: {r['throughput_per_min']:8.0f}/min, "
                    f"mean {r['mean_response_s'] * 1e3:8.1f} ms, p99 {r['p99_response_s'] * 1e3:8.1f} ms "
                    f"[{time.monotonic() - t0:.0f} s]",
                    flush=True,
                )
    doc["environment_end"] = environment()
    doc["wall_s"] = time.monotonic() - t0
    save()
    return doc


def full_view(points: list[dict]) -> list[dict]:
    """The points in the full accounting (every ended request, timeouts at the timeout), in the
    shape ``targets`` and the report read; points without it (older summaries) are left out."""
    return [{**p, **p["full"]} for p in points if "full" in p]


def targets(points: list[dict]) -> dict:
    """Issue 6's three targets, computed from the points (absent modes give ``None``):

    - per mode, throughput at the highest load as a fraction of the mode's peak (gatekeeper ≥ 0.95
      while direct falls);
    - fifo mean response / sjf mean response at the highest load common to both (≥ 10);
    - sjf / fifo mean response of the costliest interactions there (≤ 1.2): Admin Confirm, the
      costliest per request but rare (few samples), and Best Sellers, the costliest frequent one.
    """
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for p in points:
        by_mode[p["mode"]].append(p)
    out: dict = {"throughput_at_highest_load_over_peak": {}}
    for mode, pts in by_mode.items():
        peak = max(pts, key=lambda p: p["throughput_per_min"])
        last = max(pts, key=lambda p: p["browsers"])
        out["throughput_at_highest_load_over_peak"][mode] = {
            "peak_per_min": peak["throughput_per_min"],
            "peak_browsers": peak["browsers"],
            "highest_browsers": last["browsers"],
            "at_highest_per_min": last["throughput_per_min"],
            "ratio": last["throughput_per_min"] / peak["throughput_per_min"]
            if peak["throughput_per_min"]
            else None,
        }
    common = sorted(
        {p["browsers"] for p in by_mode.get("fifo", [])} & {p["browsers"] for p in by_mode.get("sjf", [])}
    )
    if common:
        n = common[-1]
        fifo = next(p for p in by_mode["fifo"] if p["browsers"] == n)
        sjf = next(p for p in by_mode["sjf"] if p["browsers"] == n)
        out["browsers"] = n
        out["fifo_over_sjf_mean_response"] = fifo["mean_response_s"] / sjf["mean_response_s"]
        costliest = {}
        for code in ("ADMC", "BESS"):
            f = fifo["per_interaction"].get(code, {})
            s = sjf["per_interaction"].get(code, {})
            if f.get("mean_response_s") and s.get("mean_response_s"):
                costliest[code] = {
                    "sjf_over_fifo": s["mean_response_s"] / f["mean_response_s"],
                    "fifo_mean_response_s": f["mean_response_s"],
                    "sjf_mean_response_s": s["mean_response_s"],
                    "fifo_count": f.get("count"),
                    "sjf_count": s.get("count"),
                }
        out["costliest_sjf_over_fifo"] = costliest
    return out


#: Cheap and costly interactions shown in the wait/exec figures (the paper's Figures 11–13 use
#: "Exec Search" and "Admin Response"; Best Sellers is our costly one that occurs often enough
#: to measure in short runs).
CHEAP, COSTLY = "SRES", "BESS"


PAPER_TABLE1 = REPO / "examples" / "bookstore" / "data" / "tpcw-costs-gatekeeper-table1.csv"
#: The paper's interaction names (Table 1) → our page codes.
PAPER_NAMES = {"Admin Response": "ADMC", "Execute Search": "SRES"}


def paper_table1() -> dict[str, dict[str, float]]:
    """Page code → the paper's Table 1 row (no-load and high-load cost in ms, frequency in percent)."""
    by_name = {name: code for code, (_, name) in PAGES.items()} | PAPER_NAMES
    out = {}
    with open(PAPER_TABLE1, newline="") as f:
        for row in csv.DictReader(f):
            code = by_name.get(row["interaction"])
            if code:
                out[code] = {k: float(v) for k, v in row.items() if k != "interaction"}
    return out


def _num(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f}"


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.1f}"


def report(summary_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Figures and tables from ``summary.json``: throughput and mean response time vs browsers (paper
    Figures 5 and 9), wait vs execution time for a cheap, a costly and the average interaction
    under fifo and sjf (Figures 11–13), the aging continuum (Figure 14), learned vs measured costs at
    no load and at peak next to the paper's Table 1, and a markdown summary with the targets.
    Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(summary_path.read_text())
    out_dir = out_dir or summary_path.parent
    points = doc["points"]
    modes = list(dict.fromkeys(p["mode"] for p in points))
    gk_modes = [m for m in modes if m != "direct"]
    written: list[Path] = []
    env = doc.get("environment", {})
    where = ""
    if env:
        where = f"CPUs {env.get('cpus')} of {env.get('online_cpus')}, nice {env.get('nice')}"
        if doc.get("think_shortening"):
            where += f", think time ÷{doc['think_shortening']:.0f}"

    def label(m: str) -> str:
        return m if m == "direct" else f"gatekeeper-{m}"

    def series(mode: str, key) -> tuple[list[int], list[float]]:
        pts = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["browsers"])
        return [p["browsers"] for p in pts], [key(p) for p in pts]

    def line_figure(name: str, shown: list[str], key, ylabel: str, title: str, log: bool) -> None:
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in shown:
            x, y = series(m, key)
            ax.plot(x, y, marker="o", label=label(m))
        ax.set_xlabel("emulated browsers")
        ax.set_ylabel(ylabel)
        ax.set_title(title + (f"\n({where})" if where else ""), fontsize=9)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        path = out_dir / f"tpcw-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    aging = [m for m in modes if m.startswith("sjf-aging")]
    line_figure(
        "throughput",
        modes,
        lambda p: p["throughput_per_min"],
        "throughput (interactions/min)",
        "Throughput (paper Figure 5)",
        False,
    )
    line_figure(
        "response",
        [m for m in modes if m not in aging],
        lambda p: p["mean_response_s"] * 1e3,
        "mean response time (ms)",
        "Response time (paper Figure 9)",
        True,
    )
    continuum = [m for m in ("fifo", *aging, "sjf") if m in modes]
    if aging:
        line_figure(
            "aging",
            continuum,
            lambda p: p["mean_response_s"] * 1e3,
            "mean response time (ms)",
            "Aging continuum, sjf-aging:X = wait ≤ X × cost (paper Figure 14)",
            True,
        )

    def wait_exec(p: dict, code: str | None) -> tuple[float, float]:
        per = p.get("per_interaction", {})
        if code is not None:
            e = per.get(code, {})
            return e.get("mean_wait_s", math.nan), e.get("mean_exec_s", math.nan)
        n = sum(e.get("count", 0) for e in per.values())
        if not n:
            return math.nan, math.nan
        w = sum(e.get("count", 0) * e.get("mean_wait_s", 0.0) for e in per.values()) / n
        x = sum(e.get("count", 0) * e.get("mean_exec_s", 0.0) for e in per.values()) / n
        return w, x

    shown = [m for m in ("fifo", "sjf") if m in modes] or gk_modes or modes
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=False)
    panels = (
        (CHEAP, "Search Results, cheap (paper Figure 11)"),
        (COSTLY, "Best Sellers, costly (paper Figure 12)"),
        (None, "average (paper Figure 13)"),
    )
    for ax, (code, title) in zip(axes, panels, strict=True):
        for m in shown:
            x, w = series(m, lambda p, c=code: wait_exec(p, c)[0] * 1e3)
            _, e = series(m, lambda p, c=code: wait_exec(p, c)[1] * 1e3)
            (line,) = ax.plot(x, e, marker="o", label=f"{m} exec")
            ax.plot(x, w, marker="x", linestyle="--", color=line.get_color(), label=f"{m} wait")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("emulated browsers")
        ax.set_ylabel("ms")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    path = out_dir / "tpcw-wait-exec.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    # Table 1: learned cost (the gatekeeper's estimate) and measured execution time (admission to
    # last byte) per interaction at no load (the lightest load point) and at peak (the load point
    # of highest throughput), for sjf (or the first gatekeeper mode), next to the paper's Table 1.
    ref = "sjf" if "sjf" in modes else (gk_modes[0] if gk_modes else None)
    lines = [
        f"Costs per interaction (ms), mode {ref}; paper: MySQL, Table 1 of Elnikety et al. 2004.",
        "",
        "| interaction | paper no load | paper high load | learned, no load | measured, no load "
        "| learned, peak | measured, peak | paper mix % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if ref is not None:
        pts = [p for p in points if p["mode"] == ref]
        lo = min(pts, key=lambda p: p["browsers"])
        hi = max(pts, key=lambda p: p["throughput_per_min"])
        lines[0] += f" No load = {lo['browsers']} browsers, peak = {hi['browsers']} browsers."
        paper = paper_table1()
        for code, (_, name) in PAGES.items():
            a, b = lo["per_interaction"].get(code, {}), hi["per_interaction"].get(code, {})
            pp = paper.get(code, {})
            row = [
                name,
                f"{pp['no_load_ms']:.2f}" if pp else "-",
                f"{pp['high_load_ms']:.2f}" if pp else "-",
                _ms(a.get("learned_cost_s")),
                _ms(a.get("mean_exec_s")),
                _ms(b.get("learned_cost_s")),
                _ms(b.get("mean_exec_s")),
                f"{pp['frequency_percent']:g}" if pp else "-",
            ]
            lines.append("| " + " | ".join(row) + " |")
    path = out_dir / "tpcw-table1.md"
    path.write_text("\n".join(lines) + "\n")
    written.append(path)

    # Summary: throughput and mean response per (mode, browsers), and the targets.
    t = doc.get("targets") or targets(points)
    browsers = sorted({p["browsers"] for p in points})
    repeat = doc.get("best_sellers_repeat", 1)
    if repeat != 1:
        # Not TPC-W's Best Sellers: say so where every figure is read.
        where += f"; Best Sellers runs its query {repeat}x per request, not once as in TPC-W"
    md = [f"# Gatekeeper on the TPC-W bookstore ({where}; capacity {doc.get('capacity', '?')})", ""]

    def grid(cell: Callable[[dict], str]) -> list[str]:
        """A mode x browsers table; ``cell`` renders one point (absent points are blank)."""
        rows = ["| mode | " + " | ".join(str(n) for n in browsers) + " |", "|---" * (len(browsers) + 1) + "|"]
        for m in modes:
            at = {p["browsers"]: p for p in points if p["mode"] == m}
            rows.append(f"| {m} | " + " | ".join(cell(at[n]) if n in at else "" for n in browsers) + " |")
        return rows + [""]

    md += ["## Throughput (interactions/min)", "", *grid(lambda p: f"{p['throughput_per_min']:.0f}")]
    md += ["## Mean response time (ms)", "", *grid(lambda p: _ms(p["mean_response_s"]))]
    if any("cpu" in p for p in points):
        md += [
            "## CPU stolen by the host (s, the most of any CPU the sweep ran on, over the whole load run)",
            "",
            "A point whose throughput dips with steal of more than a few percent of its run lost the CPU to "
            "the host, not to its policy.",
            "",
            *grid(lambda p: "" if p.get("cpu") is None else f"{p['cpu']['max_steal_s']:.2f}"),
        ]
    if any("full" in p for p in points):
        md += [
            f"## Full accounting (every ended request; a timeout counts as {doc.get('client_timeout_s')} s)",
            "",
            "Throughput (interactions/min) / mean response time (ms):",
            "",
            *grid(
                lambda p: (
                    ""
                    if "full" not in p
                    else f"{p['full']['throughput_per_min']:.0f} / {_ms(p['full']['mean_response_s'])}"
                )
            ),
        ]
        md += [
            "## Little's law per point (N = X (R + Z), from the request log)",
            "",
            "R ended: mean response of the requests ended in the window; R all: with those unfinished at"
            " its end at their wait so far (a lower bound); R implied = N / X − Z; waiting: time-average"
            " number of browsers waiting for a response.",
            "",
            "| mode | browsers | X full (/s) | R ended (ms) | R all (ms) | R implied (ms) | Z (ms) "
            "| X(R+Z) full | X(R+Z) successful only | waiting | timed out | failed | in flight at end |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in points:
            lt = p.get("little")
            if not lt:
                continue
            f = p["full"]
            md.append(
                f"| {p['mode']} | {p['browsers']} | {f['throughput_per_min'] / 60:.1f} | "
                f"{_ms(f.get('mean_response_ended_s'))} | {_ms(f['mean_response_s'])} | "
                f"{_ms(lt.get('implied_mean_response_s'))} | {_ms(lt['mean_think_s'])} | "
                f"{_num(lt['n_full'])} | {_num(lt['n_paper'])} | {_num(lt.get('mean_waiting'))} | "
                f"{p.get('timed_out', 0)} | "
                f"{p.get('failed', 0)} | {p.get('in_flight_at_end', 0)} |"
            )
        md.append("")
    timelines = []
    warmup_s = float(doc.get("config", {}).get("load", {}).get("warmup_s", 0.0))
    for p in points:
        name = f"{p['mode'].replace(':', '-').replace('@', '-')}-{p['browsers']}"
        path = summary_path.parent / name / "timeline.csv"
        if p["mode"] != "direct" and path.exists():
            timelines.append((p, timeline_stats(path, warmup_s)))
    if timelines:
        md += [
            f"## Learned costs over time (each point's timeline.csv, sampled once a second, after the "
            f"{warmup_s:g} s warm-up)",
            "",
            "A type whose learned cost reaches the capacity runs only when nothing else is admitted, and "
            "under SJF a type priced behind the work that fills the gate is not admitted at all: it gets "
            "no new samples, so its estimate cannot move (a lock-in) unless the gatekeeper re-samples it "
            "(a probe after `resample_after` without a sample, 5 s by default). *Longest unchanged*: the "
            "longest span over which a type's learned cost did not move (no sample came back), for the "
            "type where it is longest; a rare type also stays unchanged between its arrivals, so compare "
            "with fifo at the same load.",
            "",
            "| mode | browsers | samples | types at or above the capacity (s) | Search Results max (ms) "
            "| Best Sellers max (ms) | longest unchanged (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for p, st in timelines:
            over = (
                ", ".join(f"{k} {v:.0f}" for k, v in sorted(st["at_or_above_capacity_s"].items())) or "none"
            )
            mx = st["max_cost_s"]
            frozen = st.get("longest_unchanged_s", {})
            longest = max(frozen, key=frozen.get) if frozen else None
            md.append(
                f"| {p['mode']} | {p['browsers']} | {st['samples']} | {over} | "
                f"{_ms(mx.get('GET /search_results'))} | {_ms(mx.get('GET /best_sellers'))} | "
                + (f"{frozen[longest]:.0f} ({longest}) |" if longest else "– |")
            )
        md.append("")
    joined_pts = [p for p in points if "joined" in p]
    if joined_pts:
        md += [
            "## Browsers' and bookstore's logs joined per request",
            "",
            "Successful requests: exec = the bookstore's handler time plus the browser's read after its "
            "first byte; wait = the rest of the response time (connection, proxy, admission queue, "
            "relay), on the same requests (matched: the "
            "share found in the bookstore's log). Failed: HTTP errors, e.g. the gatekeeper's 503 after "
            "max_queue_wait_s. Given up: the browser's timeout ended them; reached bookstore = the "
            "bookstore began them while the browser still waited (dropped: it then saw the connection "
            "close and dropped the handler; PostgreSQL may still finish the query); bookstore s = their "
            "time in the bookstore's handlers (summed over concurrent requests, not CPU time). Unmatched: "
            "bookstore requests no browser request accounts for (begun after their browser had gone, "
            "errors, or not matched). Bookstore s, all: every request it began in the window.",
            "",
            "| mode | browsers | matched | mean wait (ms) | mean exec (ms) | mean response (ms) | failed "
            "| given up | reached bookstore | dropped | bookstore s on given up | unmatched (n / s) "
            "| bookstore s, all | cancelled while queued (whole run) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in joined_pts:
            j, per = p["joined"], p.get("per_interaction", {})
            n = sum(e.get("joined_count", 0) for e in per.values())

            def avg(key: str, per=per, n=n) -> float | None:
                if not n:
                    return None
                return sum(e.get("joined_count", 0) * e.get(key, 0.0) for e in per.values()) / n

            g, u = j["given_up"], j.get("unmatched_app", {})
            cancelled = p.get("gatekeeper_cancelled_while_queued")
            md.append(
                f"| {p['mode']} | {p['browsers']} | {j['matched']}/{j['ok']} | {_ms(avg('mean_wait_s'))} | "
                f"{_ms(avg('mean_exec_s'))} | {_ms(avg('mean_response_s'))} | {p.get('failed', 0)} | "
                f"{g['count']} | "
                f"{g['reached_app']} | {g['dropped']} | {g['app_s']:.1f} | "
                f"{u.get('count', '-')} / {u.get('app_s', 0.0):.1f} | "
                f"{j['app_busy_s']:.1f} | {'-' if cancelled is None else f'{cancelled:.0f}'} |"
            )
        md.append("")
    pg_pts = [p for p in points if "postgres" in p]
    if pg_pts:
        pgs = doc.get("postgres", {})
        md += [
            f"## PostgreSQL memory and I/O per point (shared_buffers {pgs.get('shared_buffers')}, work_mem "
            f"{pgs.get('work_mem')}, memory limit {pgs.get('memory_limit_mb')} MB, read limit "
            f"{pgs.get('read_iops_limit')}/s, database "
            f"{_mb(pgs.get('database_bytes'))} MB)",
            "",
            "| mode | browsers | backends' private (rss) MB | page cache MB | peak usage MB | disk reads "
            "(PostgreSQL) | disk read MB (machine) | blocks read | shared-buffer hit ratio | OOM kills |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in pg_pts:
            pg = p["postgres"]
            mem, db = pg.get("mem", {}), pg.get("db", {})
            hit = db.get("shared_buffers_hit_ratio")
            md.append(
                f"| {p['mode']} | {p['browsers']} | {_mb(mem.get('rss_bytes'))} | "
                f"{_mb(mem.get('cache_bytes'))} | {_mb(mem.get('max_usage_bytes'))} | "
                f"{pg.get('io', {}).get('reads', '-')} | {_mb(pg.get('disk_read_bytes'))} | "
                f"{db.get('blks_read', '-')} | "
                f"{'-' if hit is None else f'{hit:.3f}'} | {mem.get('oom_kill', '-')} |"
            )
        md.append("")
    md += ["## Targets (successful interactions only, the paper's accounting)", "", "```json"]
    md += [json.dumps(t, indent=2), "```", ""]
    tf = doc.get("targets_full_accounting") or targets(full_view(points))
    md += ["## Targets (full accounting)", "", "```json", json.dumps(tf, indent=2), "```", ""]
    path = out_dir / "tpcw-summary.md"
    path.write_text("\n".join(md))
    written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shortfirst_lab.tpcw", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="run an experiment file and write summary.json")
    s.add_argument("config", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--profile", default="release", help="cargo profile of the binaries (target/PROFILE)")
    s.add_argument("--capacity", help="override the gatekeeper capacity (calibrate, auto, or e.g. 500ms)")
    s.add_argument("--modes", type=lambda v: v.split(","), help="override the modes, comma-separated")
    s.add_argument("--browsers", type=lambda v: [int(x) for x in v.split(",")], help="override load points")
    s.add_argument("--think", help="override the think time (a load-generator distribution; const:0: none)")
    s.add_argument("--duration", type=float, help="override [load] duration_s")
    s.add_argument("--warmup", type=float, help="override [load] warmup_s")
    s.add_argument("--client-timeout", type=float, help="override [load] client_timeout_s")
    s.add_argument("--items", type=int, help="override [bookstore] items")
    s.add_argument("--customers", type=int, help="override [bookstore] customers")
    s.add_argument(
        "--best-sellers-repeat",
        type=int,
        help="override [bookstore] best_sellers_repeat (runs of Best Sellers' query per request; TPC-W: 1)",
    )
    s.add_argument("--memory-limit-mb", type=int, help="override [postgres] memory_limit_mb")
    s.add_argument("--shared-buffers", help="override [postgres] shared_buffers")
    s.add_argument("--work-mem", help="override [postgres] work_mem")
    s.add_argument("--read-iops-limit", type=int, help="override [postgres] read_iops_limit")
    s.add_argument(
        "--max-queue-wait",
        type=float,
        help="override [gatekeeper] max_queue_wait_s (seconds; 0: no limit)",
    )
    s.add_argument(
        "--calibrate-with",
        choices=["closed-loop", "browsers"],
        help="override [gatekeeper] calibrate_with",
    )
    r = sub.add_parser("report", help="figures and the learned-cost table from a summary.json")
    r.add_argument("summary", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "report":
        for p in report(a.summary):
            print(p)
        return 0
    # SIGTERM (the lead stopping a sweep, a CI timeout) unwinds like Ctrl-C, so every context
    # manager stops what it started: gatekeeper, bookstore, load generator, PostgreSQL and its groups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        overrides = {
            "capacity": a.capacity,
            "modes": a.modes,
            "browsers": a.browsers,
            "think": a.think,
            "duration_s": a.duration,
            "warmup_s": a.warmup,
            "client_timeout_s": a.client_timeout,
            "max_queue_wait_s": a.max_queue_wait,
            "calibrate_with": a.calibrate_with,
            "items": a.items,
            "customers": a.customers,
            "best_sellers_repeat": a.best_sellers_repeat,
            "postgres": {
                "memory_limit_mb": a.memory_limit_mb,
                "shared_buffers": a.shared_buffers,
                "work_mem": a.work_mem,
                "read_iops_limit": a.read_iops_limit,
            },
        }
        sweep(a.config, a.out, Binaries.default(a.profile), overrides)
        report(a.out / "summary.json")
    except TpcwError as e:
        print(f"tpcw: error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
