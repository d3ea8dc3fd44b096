"""The bookstore's private PostgreSQL: started and stopped by examples/bookstore/pg.sh, its
settings (the experiment file's `[postgres]`), memory and blkio groups, the generated
database, and the counters read around each point.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .... import commands
from ....kit import REPO, free_port
from .base import GatekeeperError

PG_SH = REPO / "examples" / "bookstore" / "pg.sh"


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
            raise GatekeeperError(f"[postgres]: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        for key in ("memory_limit_mb", "read_iops_limit"):
            v = table.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise GatekeeperError(f"[postgres] {key} must be a positive integer, got {v!r}")
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

    @property
    def postmaster_pid(self) -> int:
        """The postmaster's process id (the first line of its `postmaster.pid`)."""
        path = self.dir / "data" / "postmaster.pid"
        try:
            return int(path.read_text().split("\n", 1)[0])
        except (OSError, ValueError) as e:
            raise GatekeeperError(f"{path}: no postmaster process id ({e})") from None

    def set_memory_limit(self, mb: int) -> None:
        self._pg_sh("memory-limit", mb)

    def set_read_iops_limit(self, reads_per_s: int) -> None:
        self._pg_sh("read-iops-limit", reads_per_s)

    def _pg_sh(self, cmd: str, value: int) -> None:
        out = subprocess.run(
            [str(PG_SH), cmd, str(self.dir), str(value)], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise GatekeeperError(f"pg.sh {cmd} failed: {out.stderr.strip()}")

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
                raise GatekeeperError(
                    f"PostgreSQL in {self.dir} not accepting connections after {timeout_s} s"
                )
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
                raise GatekeeperError(f"prewarming the database failed: {out.stderr.strip()}")
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
    raise GatekeeperError("PostgreSQL binaries not found in /usr/lib/postgresql/{17,16,15}/bin")


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
def postgres(
    max_connections: int = 300, settings: PgSettings | None = None, prefix: list[str] | None = None
) -> Iterator[Postgres]:
    """A private PostgreSQL for the duration of the block, started by `prefix` + pg.sh (e.g.
    `python -m shortfirst_lab cpus run --`: the server and its backends on the reserved CPU).
    With ``settings.memory_limit_mb`` it runs in a uniquely named memory group
    (``shortfirst-tpcw-PID-RANDOM``), created before the postmaster starts and removed when the
    block ends, however it ends (``pg.sh stop``; the watchdog, if this process dies); the limit
    itself is set by the caller (``Postgres.set_memory_limit``), after loading the data."""
    settings = settings or PgSettings()
    if not PG_SH.exists():
        raise GatekeeperError(f"{PG_SH} missing")
    if settings.needs_groups and os.geteuid() != 0:
        raise GatekeeperError(
            "[postgres] memory_limit_mb and read_iops_limit need root (they create cgroup-v1 "
            "memory and blkio groups); run as root or drop the keys"
        )
    d = Path(tempfile.mkdtemp(prefix="tpcw-pg-", dir="/tmp"))
    port = free_port()
    args = [
        *(prefix or []),
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
            raise GatekeeperError(f"pg.sh start failed: {out.stderr.strip()}")
        cg = d / "cgroup"
        yield Postgres(out.stdout.strip(), d, Path(cg.read_text().strip()) if cg.exists() else None)
    finally:
        subprocess.run([str(PG_SH), "stop", str(d)], capture_output=True, check=False)
        shutil.rmtree(d, ignore_errors=True)


def generate(bookstore: Path, db_url: str, items: int, customers: int, seed: int) -> None:
    """`bookstore gen`: the TPC-W database at the given scale."""
    out = subprocess.run(
        commands.bookstore_gen(bookstore, db=db_url, items=items, customers=customers, seed=seed),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise GatekeeperError(f"bookstore gen failed: {out.stderr.strip()}")


def database_bytes(url: str) -> int | None:
    out = subprocess.run(
        [str(pg_bin() / "psql"), url, "-tAc", "SELECT pg_database_size(current_database())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None


@contextmanager
def shop(cfg: dict, bookstore: Path, doc: dict) -> Iterator[Postgres]:
    """PostgreSQL (``[postgres]``) with the generated database (``[bookstore]``). Records the
    settings, the memory group's limit and the generation time in ``doc``. The memory limit is set
    after generation, so that it shapes the experiment, not the loading; the kernel then reclaims
    the group's page cache down to it."""
    b = cfg["bookstore"]
    settings = PgSettings.from_config(cfg.get("postgres", {}))
    pool = int(b.get("pool", 128))
    t0 = time.monotonic()
    with postgres(max_connections=pool + 20, settings=settings) as pg:
        generate(bookstore, pg.url, b["items"], b["customers"], b.get("seed", 1))
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
