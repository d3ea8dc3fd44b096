"""pgbench (PostgreSQL's, not ours): its data (`init`), the scripts the experiments run, its
command line, one run with its report parsed (`run`, `Report`) and its per-transaction logs
(`-l`) read back (`read_log`).

With `-R` pgbench schedules transactions as a Poisson process per thread and logs each with
its latency counted from the *scheduled* start (the time in a `-l` row includes the schedule
lag, logged beside it), so waiting anywhere, in pgbench, in a proxy or in the database,
counts. At the end of `-T` it lets the transactions under way finish and logs them.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import GatekeeperError
from ..backends.postgres import pg_bin

#: Seconds a pgbench run may take past its duration (connecting its clients, the
#: transactions under way at the end) before it is killed.
GRACE_S = 120.0
#: Most rows read from one point's logs (a bound on memory: ~ 100 bytes a row).
MAX_LOG_ROWS = 5_000_000


def pgbench() -> Path:
    return pg_bin() / "pgbench"


def init(url: str, scale: int, log: Path) -> float:
    """`pgbench -i` at `scale` (tables, primary keys, vacuum), then parallel query off for the
    database, so one transaction is one backend on one CPU. Returns seconds."""
    t0 = time.monotonic()
    steps = [
        [str(pgbench()), "-i", "-q", "-s", str(scale), url],
        [
            str(pg_bin() / "psql"),
            url,
            "-v",
            "ON_ERROR_STOP=1",
            "-qc",
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET max_parallel_workers_per_gather = 0', "
            "current_database()); END $$",
        ],
    ]
    with open(log, "a") as f:
        for argv in steps:
            r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=False)
            if r.returncode != 0:
                raise GatekeeperError(f"{' '.join(argv)} failed (exit {r.returncode}); see {log}")
    return time.monotonic() - t0


def cheap_script(accounts: int) -> str:
    """A point lookup by primary key among `accounts`: a fraction of a millisecond."""
    return f"\\set aid random(1, {accounts})\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"


def expensive_script(accounts: int, rows: int) -> str:
    """An aggregate over `rows` consecutive accounts of `accounts` (a range scan of the
    primary key)."""
    return (
        f"\\set a random(1, {accounts - rows + 1})\n"
        "SELECT bid, count(*), sum(abalance) FROM pgbench_accounts "
        f"WHERE aid BETWEEN :a AND :a + {rows - 1} GROUP BY bid;\n"
    )


def distinct_script(accounts: int, texts: int) -> str:
    """One point lookup per transaction in one of `texts` statement texts, picked at random:
    each text names its column differently (`AS c17`), so each has its own fingerprint. The
    pick is a binary search of nested `\\if`s, a few comparisons whatever `texts` is."""
    lines = [f"\\set n random(0, {texts - 1})", f"\\set aid random(1, {accounts})"]

    def pick(lo: int, hi: int) -> None:
        if hi - lo == 1:
            lines.append(f"SELECT abalance AS c{lo} FROM pgbench_accounts WHERE aid = :aid;")
            return
        mid = (lo + hi) // 2
        lines.append(f"\\if :n < {mid}")
        pick(lo, mid)
        lines.append("\\else")
        pick(mid, hi)
        lines.append("\\endif")

    pick(0, texts)
    return "\n".join(lines) + "\n"


def argv(
    url: str,
    *,
    script: list[str],
    protocol: str,
    clients: int,
    duration_s: float,
    seed: int,
    rate_per_s: float | None = None,
    log_prefix: Path | None = None,
) -> list[str]:
    """pgbench without vacuum (`-n`), one thread (`-j 1`), the script given as its options
    (`-S`, `-b tpcb-like` or `-f FILE`), the query protocol (`-M`), clients, whole seconds
    (`-T`), the seed, the open-loop rate (`-R`) and per-transaction logs (`-l`)."""
    out = [str(pgbench()), "-n", "-j", "1", *script, "-M", protocol, "-c", str(clients)]
    out += ["-T", str(max(1, round(duration_s))), f"--random-seed={seed}"]
    if rate_per_s is not None:
        out += ["-R", f"{rate_per_s:.3f}"]
    if log_prefix is not None:
        out += ["-l", f"--log-prefix={log_prefix}"]
    return out + [url]


@dataclass(frozen=True)
class Report:
    """What pgbench printed: transactions/s (without connection time), transactions done,
    clients aborted by an error, its exit code, wall time and when it was launched (epoch)."""

    tps: float | None
    transactions: int | None
    aborted_clients: int
    exit_code: int
    wall_s: float
    started_epoch_s: float = 0.0


_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_DONE = re.compile(r"^number of transactions actually processed: ([0-9]+)", re.M)
_ABORTED = re.compile(r"^client [0-9]+ aborted", re.M)


def parse(text: str, exit_code: int, wall_s: float, started_epoch_s: float = 0.0) -> Report:
    """pgbench's report (stdout and stderr together)."""
    tps, done = _TPS.search(text), _DONE.search(text)
    return Report(
        float(tps.group(1)) if tps else None,
        int(done.group(1)) if done else None,
        len(_ABORTED.findall(text)),
        exit_code,
        wall_s,
        started_epoch_s,
    )


@dataclass(frozen=True)
class Started:
    """A pgbench under way: the process, its launch (monotonic and epoch seconds), its log."""

    proc: subprocess.Popen
    t0: float
    epoch_s: float
    log: Path


def start(cmd: list[str], log: Path, cwd: Path) -> Started:
    """pgbench started with its output in `log` (and its `-l` files in `cwd`)."""
    with open(log, "wb") as f:
        t0, epoch = time.monotonic(), time.time()
        return Started(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd), t0, epoch, log)


def wait(started: Started, timeout_s: float, name: str, ok_codes: tuple[int, ...] = (0,)) -> tuple[int, str]:
    """Waits for a started client `name` (pgbench, load-pg; killed past `timeout_s`): its
    exit code, one of `ok_codes`, and its output. Any other ending is a GatekeeperError."""
    proc = started.proc
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise GatekeeperError(
            f"{name} did not end in {timeout_s:g} s ({' '.join(map(str, proc.args))})"
        ) from None
    text = started.log.read_text(errors="replace")
    if code not in ok_codes:
        raise GatekeeperError(f"{name} failed (exit {code}): {text[-2000:]}")
    return code, text


def finish(started: Started, timeout_s: float) -> Report:
    """Waits for a started pgbench (killed past `timeout_s`); its report. Exit code 2 (some
    clients aborted by an error) is a result; anything else but 0 is a failure."""
    code, text = wait(started, timeout_s, "pgbench", ok_codes=(0, 2))
    return parse(text, code, time.monotonic() - started.t0, started.epoch_s)


def run(cmd: list[str], log: Path, cwd: Path, duration_s: float) -> Report:
    """One pgbench run to its end."""
    return finish(start(cmd, log, cwd), duration_s + GRACE_S)


#: What pgbench appends to the log prefix: `.PID`, and `.TID` for threads past the first.
_LOG_SUFFIX = re.compile(r"^\.[0-9]+(\.[0-9]+)?$")


@dataclass(frozen=True)
class Row:
    """A logged transaction: its scheduled start and its end (epoch seconds), latency from the
    scheduled start and schedule lag (seconds)."""

    sched_s: float
    end_s: float
    latency_s: float
    lag_s: float


def read_log(prefix: Path) -> list[Row]:
    """The rows of every `-l` file of `prefix` (`PREFIX.PID`, `PREFIX.PID.TID`): `client
    transaction time script epoch_s epoch_us [lag]`; skipped transactions (no time) are
    left out. At most MAX_LOG_ROWS."""
    rows: list[Row] = []
    files = sorted(
        f for f in prefix.parent.glob(prefix.name + ".*") if _LOG_SUFFIX.match(f.name[len(prefix.name) :])
    )
    if not files:
        raise GatekeeperError(f"no pgbench log {prefix}.*")
    for path in files:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) < 6 or p[2] == "skipped":
                    continue
                end = int(p[4]) + int(p[5]) / 1e6
                lat = int(p[2]) / 1e6
                rows.append(Row(end - lat, end, lat, int(p[6]) / 1e6 if len(p) > 6 else 0.0))
                if len(rows) >= MAX_LOG_ROWS:
                    raise GatekeeperError(f"{prefix}: more than {MAX_LOG_ROWS} logged transactions")
    return rows


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`, or None when empty."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(q * len(v) + 0.5) - 1))]
