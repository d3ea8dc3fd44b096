"""Running an experiment file: every (mode, browsers) point on a fresh bookstore over a prewarmed
database, written to summary.json after each point.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ....kit import cpu_times, fetch_text, git, write_json
from ....spec.tpcw import Mode, load_config, parse_mode
from ..backends.base import GatekeeperError, serve
from ..backends.bookstore import SESSION_FILE, BookstoreBackend
from ..backends.postgres import PgSettings, Postgres, shop, snapshot_delta
from ..pg.arms import pg_gatekeeper
from ..run import Gate, drive, front
from ..timeline import TIMELINE_SERIES, Sampler, write_timeline
from .calibration import calibrate, calibrate_with_browsers
from .config import Binaries, best_sellers_repeat_of, browsers_for, think_max_s
from .join import apply_join, join_requests
from .measure import analyze, cpu_delta, full_view, parse_metrics, targets, type_to_code


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
    patience: str | None = None,
    db_gate: Gate | None = None,
) -> dict:
    """One measurement of the bookstore at ``app_url``: ``mode`` (`spec.tpcw.Mode`) is
    ``direct``, a gatekeeper policy in front of the bookstore (``fifo``, ``sjf``,
    ``sjf-aging:X``, ``count:N``; its own capacity after ``@``, else ``capacity``), or a mode of
    the database tier (``db:sjf``), whose gatekeeper ``db_gate`` the caller has put between the
    bookstore and PostgreSQL (`database_front`). Its logs go to ``workdir/name`` (default: from
    the mode and the browsers)."""
    m = parse_mode(mode)
    if (m.tier == "db") != (db_gate is not None):
        raise GatekeeperError(f"mode {mode}: a database-tier gatekeeper goes with db modes only, and always")
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
    flags = {"capacity": capacity, "max_queue_wait_s": max_queue_wait_s, "patience": patience}
    # The policy goes to `front` as its mode; the mode's own capacity or count bound as flags.
    flags.update({k: v for k, v in m.gatekeeper_flags.items() if k != "policy"})
    http_policy = m.policy if m.tier == "http" else "direct"
    log = workdir / name / "gatekeeper.log"
    with front(bins.shortfirst, app_url, http_policy, log, **flags) as http_gate:
        gate = db_gate or http_gate
        with _timeline(gate.admin_port, out) as timeline:
            drive(
                bins.shortfirst,
                http_gate.url,
                out,
                duration_s=duration_s,
                timeout_s=timeout_s,
                session=SESSION_FILE,
                model=f"closed:{browsers},think={think}",
                persistent=100000,
                seed=seed,
            )
        if timeline is not None:
            text = fetch_text(gate.metrics_url, timeout_s=10)
            (out / "metrics.txt").write_text(text)
            metrics = parse_metrics(text)
            # Requests whose client went away (e.g. its timeout) while they waited for admission.
            cancelled = re.search(r"^gatekeeper_cancelled_while_queued_total\s+(\S+)$", text, re.M)
    summary = _load_summary(out)
    cpu = cpu_delta(cpu_before, cpu_times(cpus))
    res = analyze(out / "requests.csv", warmup_s, duration_s, timeout_s, browsers, think_max_s(think))
    res["cpu"] = cpu
    res["load_summary_valid"] = summary.get("valid")
    res["load_started_unix_s"] = summary.get("started_unix_s")
    if mode != "direct":
        res["gatekeeper_cancelled_while_queued"] = float(cancelled.group(1)) if cancelled else None
    if pg is not None:
        res["postgres"] = snapshot_delta(before, pg.snapshot())
    res["per_interaction"] = _per_interaction(res.pop("per_interaction_response"), metrics, m.tier)
    return res


@contextlib.contextmanager
def database_front(
    binary: Path, db_url: str, mode: Mode, capacity: str, log: Path, **flags
) -> Iterator[Gate | None]:
    """For a mode of the database tier, `shortfirst gatekeeper` in front of the PostgreSQL at
    ``db_url`` with the mode's policy (``capacity`` unless the mode has its own; ``flags``: more
    keyword arguments of `commands.gatekeeper`), typing by route tags or, for ``db-fp:``, by
    fingerprint only; yields its Gate, whose URL is ``db_url``'s user and database on the
    gatekeeper's port. Yields None for any other mode."""
    if mode.tier != "db":
        yield None
        return
    gk = {"capacity": capacity, **flags, **mode.gatekeeper_flags}
    extra = ["--pg-tag-key", "none"] if mode.by_fingerprint else []
    with pg_gatekeeper(binary, db_url, log, extra=extra, **gk) as g:
        yield g


@contextlib.contextmanager
def _timeline(admin_port: int | None, out: Path) -> Iterator[Sampler | None]:
    """The gatekeeper's learned costs sampled once a second during the load, written to
    `out/timeline.csv` (nothing for `direct`, whose `admin_port` is None)."""
    if admin_port is None:
        yield None
        return
    with Sampler(None, admin_port, 1.0, keep=TIMELINE_SERIES) as sampler:
        yield sampler
    write_timeline(sampler.rows, out / "timeline.csv")


def _load_summary(out: Path) -> dict:
    """The load generator's own summary of the point (`summary.json` in its output)."""
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as e:
        raise GatekeeperError(f"shortfirst load left no summary in {out}: {e}") from None


def environment() -> dict:
    """Where the sweep ran: CPU affinity and nice value (the sweep may be pinned with ``taskset``;
    every child — PostgreSQL, bookstore, gatekeeper, load generator — inherits them), the load
    average, the commit."""
    return {
        "cpus": sorted(os.sched_getaffinity(0)),
        "online_cpus": os.cpu_count(),
        "nice": os.nice(0),
        "loadavg": list(os.getloadavg()),
        "commit": git(["rev-parse", "HEAD"]),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def sweep(
    config_path: Path, out_dir: Path, bins: Binaries | None = None, overrides: dict | None = None
) -> dict:
    """Runs the experiment file; writes ``out_dir/summary.json`` (temp file, then rename) after every
    point, so an interrupted sweep leaves the points measured so far.

    ``overrides`` replaces ``capacity`` (gatekeeper), ``modes`` and ``browsers`` of the file.
    """
    cfg = load_config(config_path, overrides)
    bins = bins or Binaries.default()
    bins.check()
    out_dir.mkdir(parents=True, exist_ok=True)
    return _Sweep(config_path, cfg, bins, out_dir).run()


class _Sweep:
    """One sweep: the summary document it keeps rewriting, and what every point is run with."""

    def __init__(self, config_path: Path, cfg: dict, bins: Binaries, out_dir: Path):
        self.cfg, self.bins, self.out_dir = cfg, bins, out_dir
        self.results: list[dict] = []
        self.doc = _new_doc(config_path, cfg, self.results)
        self.think, self.timeout_s = self.doc["think"], self.doc["client_timeout_s"]
        self.max_queue_wait_s = self.doc["max_queue_wait_s"]
        self.settings = PgSettings.from_config(cfg.get("postgres", {}))
        self.pg: Postgres | None = None  # the shop's database, once it is up
        self.t0 = time.monotonic()

    def run(self) -> dict:
        """The capacity, then every (mode, browsers) point in the file's order; returns the summary."""
        ld = self.cfg["load"]
        with shop(self.cfg, self.bins.bookstore, self.doc) as pg:
            self.pg = pg
            capacity = _capacity(self.cfg, self.bins, pg.url, self.out_dir, self.doc, self.measure)
            self.doc["capacity"] = capacity
            print(f"capacity {capacity} (setup {time.monotonic() - self.t0:.0f} s)", flush=True)
            db_capacity = _db_capacity(self.cfg, self.doc, self.measure)
            if db_capacity is not None:
                self.doc["db_capacity"] = db_capacity
                print(f"database tier's capacity {db_capacity} [{time.monotonic() - self.t0:.0f} s]")
            for mode in self.cfg["modes"]["list"]:
                cap = db_capacity if parse_mode(mode).takes_db_capacity else capacity
                for n in browsers_for(self.cfg, mode):
                    r = self.measure(mode, int(n), cap, float(ld["duration_s"]), float(ld["warmup_s"]))
                    self.results.append(r)
                    self.save()
                    print(
                        f"{mode:>12} {n:>5} browsers: {r['throughput_per_min']:8.0f}/min, "
                        f"mean {r['mean_response_s'] * 1e3:8.1f} ms, p99 {r['p99_response_s'] * 1e3:8.1f} ms "
                        f"[{time.monotonic() - self.t0:.0f} s]",
                        flush=True,
                    )
        self.doc["environment_end"] = environment()
        self.doc["wall_s"] = time.monotonic() - self.t0
        self.save()
        return self.doc

    def save(self) -> None:
        self.doc["targets"] = targets(self.results)
        self.doc["targets_full_accounting"] = targets(full_view(self.results))
        write_json(self.out_dir / "summary.json", self.doc, allow_nan=True)

    def measure(
        self, mode: str, n: int, capacity: str, duration_s: float, warmup_s: float, prefix: str = ""
    ) -> dict:
        """One point on a fresh bookstore (its pool keeps every connection it ever opened, and an
        idle PostgreSQL backend keeps its memory, so a point must not inherit the backends of the
        one before: direct at 256 browsers opens 256 of them) and a prewarmed cache."""
        pg, out_dir = self.pg, self.out_dir
        assert pg is not None, "points are measured while the shop is up"
        name = prefix + f"{mode.replace(':', '-').replace('@', '-')}-{n}"
        m = parse_mode(mode)
        pg.wait_ready()
        prewarm_s = pg.prewarm(self.settings.read_iops_limit)
        app_log = out_dir / f"bookstore-{name}.requests.csv"
        db_log = out_dir / f"gatekeeper-db-{name}.log"
        with (
            database_front(
                self.bins.shortfirst, pg.url, m, capacity, db_log, max_queue_wait_s=self.max_queue_wait_s
            ) as db_gate,
            serve(
                _bookstore(
                    self.cfg,
                    self.bins,
                    db_gate.url if db_gate else pg.url,
                    app_log,
                    route_comments=m.tier == "db" and not m.by_fingerprint,
                ),
                out_dir / f"bookstore-{name}.log",
            ) as app,
        ):
            r = run_point(
                self.bins,
                app.url,
                mode,
                capacity,
                n,
                self.think,
                duration_s,
                warmup_s,
                int(self.cfg["load"].get("seed", 1)),
                out_dir,
                self.timeout_s,
                pg,
                name=name,
                max_queue_wait_s=self.max_queue_wait_s,
                db_gate=db_gate,
            )
        started = r.pop("load_started_unix_s", None)
        if started is not None and app_log.exists():
            apply_join(
                r,
                join_requests(out_dir / name / "requests.csv", float(started), app_log, warmup_s, duration_s),
            )
        r.update({"mode": mode, "browsers": n, "loadavg": list(os.getloadavg()), "prewarm_s": prewarm_s})
        return r


def _capacity(cfg: dict, bins: Binaries, db_url: str, out_dir: Path, doc: dict, measure: Callable) -> str:
    """The gatekeeper's capacity: the file's, or calibrated (``[gatekeeper] calibrate_with``:
    with the experiment's own browsers through ``measure``, or ``shortfirst gatekeeper
    calibrate``'s closed loop on a bookstore of its own). Records the calibration in ``doc``."""
    gk = cfg.get("gatekeeper", {})
    capacity = str(gk.get("capacity", "calibrate"))
    if capacity == "calibrate" and gk.get("calibrate_with", "closed-loop") == "browsers":
        bounds = (str(gk.get("calibrate_min", "800ms")), str(gk.get("calibrate_max", "6400ms")))
        capacity, doc["calibration"] = _calibrate_with_browsers(cfg, measure, "fifo", bounds)
    elif capacity == "calibrate":
        backend = _bookstore(cfg, bins, db_url, None)
        with serve(backend, out_dir / "bookstore-calibrate.log") as app:
            capacity, doc["calibration"] = calibrate(
                bins,
                backend,
                app.url,
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
    return capacity


def _db_capacity(cfg: dict, doc: dict, measure: Callable) -> str | None:
    """The database tier's capacity (``[gatekeeper] db_capacity``): the file's, or calibrated with
    the experiment's browsers through ``db:fifo`` (recorded in ``doc["db_calibration"]``); None
    when no mode of the database tier needs it."""
    if not any(parse_mode(m).takes_db_capacity for m in cfg["modes"]["list"]):
        return None
    gk = cfg.get("gatekeeper", {})
    capacity = str(gk.get("db_capacity", "calibrate"))
    if capacity != "calibrate":
        return capacity
    bounds = (str(gk.get("db_calibrate_min", "10ms")), str(gk.get("db_calibrate_max", "800ms")))
    capacity, doc["db_calibration"] = _calibrate_with_browsers(cfg, measure, "db:fifo", bounds)
    return capacity


def _calibrate_with_browsers(
    cfg: dict, measure: Callable, policy: str, bounds: tuple[str, str]
) -> tuple[str, dict]:
    """`calibrate_with_browsers` through ``policy`` (``fifo`` or ``db:fifo``) with its own
    capacity at every step from ``bounds[0]`` to ``bounds[1]``, by ``[gatekeeper]``'s
    calibrate_* settings; the capacity and the calibration's record."""
    gk = cfg.get("gatekeeper", {})
    highest = max(max(browsers_for(cfg, m)) for m in cfg["modes"]["list"])
    return calibrate_with_browsers(
        lambda cap, n, d, w: measure(f"{policy}@{cap}", n, cap, d, w, prefix="calibrate-"),
        browsers=int(gk.get("calibrate_browsers", highest)),
        min_capacity=bounds[0],
        max_capacity=bounds[1],
        growth=float(gk.get("calibrate_growth", 2.0)),
        within=float(gk.get("calibrate_within", 0.05)),
        duration_s=float(gk.get("calibrate_browsers_duration_s", 40)),
        warmup_s=float(gk.get("calibrate_browsers_warmup_s", 20)),
        max_trials=int(gk.get("calibrate_max_trials", 6)),
    )


def _bookstore(
    cfg: dict, bins: Binaries, db_url: str, request_log: Path | None, route_comments: bool = False
) -> BookstoreBackend:
    """The experiment's bookstore (``[bookstore]``) on ``db_url``, logging its requests to
    ``request_log`` if given, tagging its statements with their routes if ``route_comments``."""
    b = cfg["bookstore"]
    pool, repeat = int(b.get("pool", 128)), best_sellers_repeat_of(b)
    return BookstoreBackend(bins.bookstore, db_url, pool, request_log, repeat, route_comments)


def _new_doc(config_path: Path, cfg: dict, results: list[dict]) -> dict:
    """The summary's header: the experiment, its settings as run, where it ran; ``results`` is
    the list the points are appended to."""
    b, ld, gk = cfg["bookstore"], cfg["load"], cfg.get("gatekeeper", {})
    # A raw load-generator think distribution (e.g. const:0 for the closed-loop exploration with a
    # fixed number in flight) replaces TPC-W's exponential one.
    think = ld.get("think") or f"exp:{ld['think_mean_s']}:{ld['think_max_s']}"
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

    timeout_s = float(ld.get("client_timeout_s", 120.0))
    doc["client_timeout_s"] = timeout_s
    max_queue_wait_s = gk.get("max_queue_wait_s")
    if max_queue_wait_s is not None:
        max_queue_wait_s = float(max_queue_wait_s)
        if not (0 < max_queue_wait_s):
            raise GatekeeperError(f"[gatekeeper] max_queue_wait_s must be positive, got {max_queue_wait_s}")
    doc["max_queue_wait_s"] = max_queue_wait_s
    best_sellers_repeat = best_sellers_repeat_of(b)
    doc["best_sellers_repeat"] = best_sellers_repeat or 1

    return doc


def _per_interaction(response: dict, metrics: dict[tuple[str, str], float], tier: str) -> dict:
    """Per interaction: count and mean response from the browsers' log; direct access waits for
    nothing, so all of it is exec; through the gatekeeper, its learned cost and the mean queue
    wait and upstream time from its per-type histograms (whole run, warm-up included). At the
    database tier a type is a transaction of the interaction, not the interaction: its figures
    are kept apart, as ``db_learned_cost_s``, ``db_mean_wait_s`` and ``db_mean_exec_s`` (per
    transaction; fingerprint types match no interaction)."""
    per = {}
    key_prefix = "db_" if tier == "db" else ""
    for code, stats in response.items():
        entry = {"count": stats["count"], "mean_response_s": stats["mean_response_s"]}
        if tier == "direct":
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
            e[key_prefix + "learned_cost_s"] = value
        for prefix, key in (
            ("gatekeeper_type_queue_wait_seconds", key_prefix + "mean_wait_s"),
            ("gatekeeper_type_upstream_seconds", key_prefix + "mean_exec_s"),
        ):
            if metric == prefix + "_sum":
                e[f"_{key}_sum"] = value
            if metric == prefix + "_count":
                e[f"_{key}_count"] = value
    for e in per.values():
        for key in (key_prefix + "mean_wait_s", key_prefix + "mean_exec_s"):
            s, n = e.pop(f"_{key}_sum", None), e.pop(f"_{key}_count", None)
            if s is not None and n:
                e[key] = s / n
    return per
