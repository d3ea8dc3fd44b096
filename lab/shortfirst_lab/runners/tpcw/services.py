"""The processes of a point besides the database: the bookstore, the gatekeeper in front of it,
the emulated browsers (`shortfirst load`), and the sampler of the gatekeeper's learned costs.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ... import commands
from ...kit import Child, free_port, wait_http
from .config import SESSION_FILE, Binaries, TpcwError


@contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """Runs ``args`` with output to ``log``; stops exactly this process (SIGTERM, then SIGKILL) on exit."""
    with Child(args, log, stop_timeout_s=10.0) as child:
        yield child.proc


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
        wait_http(url + "/healthz", p)
        yield url


@contextmanager
def gatekeeper(
    bins: Binaries,
    upstream: str,
    policy: str,
    capacity: str,
    workdir: Path,
    max_queue_wait_s: float | None = None,
    patience: str | None = None,
) -> Iterator[tuple[str, str]]:
    """Yields (proxy URL, metrics URL). ``max_queue_wait_s``: ``--max-queue-wait`` (503 after
    waiting that long for admission); ``None``: no limit. ``patience``: ``--patience``
    (``None``: the gatekeeper's default)."""
    port, admin = free_port(), free_port()
    args = commands.gatekeeper(
        bins.shortfirst,
        listen=f"127.0.0.1:{port}",
        upstream=upstream,
        policy=policy,
        capacity=capacity,
        admin=f"127.0.0.1:{admin}",
        max_queue_wait_s=max_queue_wait_s,
        patience=patience,
    )
    with process(args, workdir / "gatekeeper.log") as p:
        wait_http(f"http://127.0.0.1:{admin}/metrics", p)
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}/metrics"


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
    args = commands.load(
        bins.shortfirst,
        target,
        session=SESSION_FILE,
        out=out,
        model=f"closed:{browsers},think={think}",
        duration_s=duration_s,
        persistent=100000,
        timeout_s=timeout_s,
        seed=seed,
        quiet=True,
    )
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
