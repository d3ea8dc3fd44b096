"""Experiment runner: workload, idle calibration, then the arm × load × repeat matrix.

For each run it builds a fresh testbed (`testbed.Testbed`: server and client namespaces, the
shaped uplink: the HTB tree for an arm under the kernel's bands, a plain token bucket for a
user-space scheduler's), starts `shortfirst serve` in the server namespace (with `--scheduler
S --uplink-rate <uplink.rate>` for a user-space arm) and `shortfirst load` in a client
namespace, samples server health once a second, and leaves raw logs only::

    DIR/experiment.toml, DIR/provenance.json
    DIR/workload/{docroot/,trace.csv,commands.txt}       generated once, shared by every run
    DIR/calibration/{trace.csv,requests.csv,...}          idle fetches for the slowdown baseline
    DIR/runs/<arm>-load<ρ>-rep<k>/                        arm: fair, srpt-user, ... (run_dir_name)
        requests.csv, summary.json    written by shortfirst load, with received.csv (body bytes
                                      per 100 ms, which the report's throughput uses)
        health.csv                    1 Hz `Testbed.health_sample()`: open connections, listen
                                      overflows/drops, per-band bytes/backlog/drops, server CPU
                                      seconds (the testbed reads /proc/<pid>/stat)
        uplink.json                   per-band qdisc counters at the end of the run (a token
                                      bucket's as band 1)
        server.log, load.log          the two processes' output
        server_metrics.txt            the server's Prometheus metrics at the end of the run
        commands.txt                  exact command lines
        sim/, sim-wire/               the run's ideals: `shortfirst sim` on its own arrivals,
                                      bodies or wire costs as service (idealsim.py)
        run.json                      status, seed, timings, exit codes

While a run is going on its raw logs are written to a staging directory in RAM and moved
into ``runs/<run>`` when it ends (`stage.py`); health sampling is `health.py`.

Everything the report shows is then computed from these files alone (`report.build`).
A run is retried never; a failed run is recorded (`run.json` status) and the matrix goes on.
`--resume` skips runs whose `run.json` says ok, so a long experiment survives an interruption;
it also takes an experiment file that only adds setups to the one the directory ran (the new
setups' runs are made, the others kept).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from .. import commands
from ..analysis import idealsim, models, overload, report, series
from ..kit import LabError, parse_proc_pairs, utc_now, write_atomic, write_json
from ..kit import provenance as collect
from ..spec import schedules
from ..spec.experiment import Experiment, RunSpec, load_experiment
from ..testbed import synrto
from ..testbed.placement import Placement
from . import factors, wanrun
from .health import HealthSampler, counter_delta
from .stage import make_stage, touch_docroot, unstage

SERVER_START_TIMEOUT_S = 15.0
SERVER_STOP_TIMEOUT_S = 15.0
ADMIN_PORT = 9464
# Calibration spacing: each idle fetch gets CAL_GAP_FACTOR × its ideal serialisation time plus
# CAL_GAP_S before the next starts, so nothing overlaps; overlaps are still detected and dropped.
CAL_GAP_FACTOR = 1.6
CAL_GAP_S = 0.15


class RunnerError(LabError, RuntimeError):
    """The experiment cannot proceed (names what failed and where its log is)."""


def repo_root() -> Path:
    here = Path(__file__).resolve()
    for p in here.parents:
        if (p / "Cargo.toml").exists() and (p / "lab").is_dir():
            return p
    return Path.cwd()


def _log(msg: str) -> None:
    tqdm.write(f"[lab] {msg}", file=sys.stderr)


def _write_commands(path: Path, argvs: list[list[str]], note: str = "") -> None:
    text = (f"# {note}\n" if note else "") + "".join(shlex.join(a) + "\n" for a in argvs)
    write_atomic(path, text)


# --------------------------------------------------------------------------- workload


def generate_workload(exp: Experiment, out: Path, bin_path: Path) -> Path:
    """`shortfirst workload generate` into DIR/workload (skipped if already complete)."""
    wdir = out / "workload"
    trace = wdir / "trace.csv"
    stamp = wdir / "workload.json"
    want = vars(exp.workload)
    if trace.exists() and stamp.exists() and json.loads(stamp.read_text()) == want:
        return trace
    if wdir.exists():
        shutil.rmtree(wdir)
    wdir.mkdir(parents=True)
    argv = [
        str(bin_path),
        "workload",
        "generate",
        "--kind",
        exp.workload.kind,
        "--files",
        str(exp.workload.files),
        "--requests",
        str(exp.workload.requests),
        "--seed",
        str(exp.workload.seed),
        "--out",
        str(wdir),
    ]
    _write_commands(wdir / "commands.txt", [argv])
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    write_atomic(wdir / "generate.log", r.stdout + r.stderr)
    if r.returncode != 0 or not trace.exists():
        raise RunnerError(f"workload generation failed (exit {r.returncode}); see {wdir / 'generate.log'}")
    write_json(stamp, want)
    return trace


def check_trace_covers(
    exp: Experiment, trace: Path, capacity_bits_per_s: int | None = None
) -> dict[str, Any]:
    """The scaled trace must last at least `duration_s` at the highest load.

    Load scaling stretches the trace so that requested bits/s = ρ × rate, so at load ρ it lasts
    total_bits / (ρ × rate) seconds. Shorter than the run would silently shrink the window.
    The rate is the uplink's, or `capacity_bits_per_s` (a farm's: hosts × rate).
    """
    df = pd.read_csv(trace, usecols=["size_bytes"])
    total_bits = float(df["size_bytes"].sum()) * 8.0
    mean_size = float(df["size_bytes"].mean())
    # A schedule replays the whole trace at load x multiplier: over a run, x its mean.
    try:
        rho = max(exp.loads) * max(schedules.mean_multiplier(spec.schedule) for spec in exp.matrix())
    except schedules.ScheduleError as e:
        raise RunnerError(f"{exp.name}: {e}") from None
    capacity = capacity_bits_per_s or exp.uplink.rate_bits_per_s
    lasts_s = total_bits / (rho * capacity)
    if lasts_s < exp.run.duration_s:
        need = int(np.ceil(len(df) * exp.run.duration_s / lasts_s * 1.05))
        raise RunnerError(
            f"{exp.name}: the trace ({len(df)} requests, mean {mean_size:.0f} B) "
            f"lasts only {lasts_s:.0f} s at "
            f"load {rho:g} on {capacity / 1e6:g} Mbit/s, but run.duration_s = "
            f"{exp.run.duration_s:g}; set workload.requests to at least {need}"
        )
    return {
        "requests": len(df),
        "mean_size_bytes": mean_size,
        "lasts_s_at_max_load": lasts_s,
        "max_load": rho,
    }


# --------------------------------------------------------------------------- one run


@dataclass
class _LiveRun:
    """What a run has started so far (`Runner._drive`), for `Runner._collect` to stop and read."""

    sampler: HealthSampler | None = None
    gen: subprocess.Popen | None = None
    tcp_before: dict[str, int] = field(default_factory=dict)
    rtts: dict[str, Any] = field(default_factory=dict)


class Runner:
    def __init__(
        self,
        exp: Experiment,
        out: Path,
        bin_path: Path,
        resume: bool = False,
        progress: bool = True,
        placement: Placement | None = None,
    ):
        self.exp = exp
        self.placement = placement or Placement()
        self.out = out
        self.bin = bin_path
        self.resume = resume
        self.progress = progress
        self.trace: Path | None = None
        self.docroot: Path | None = None
        self._sim: bool | None = None

    # Imported lazily so analysis/report/tests work on machines without pyroute2 privileges.
    @staticmethod
    def _testbed_module():
        from ..testbed import bed as testbed

        return testbed

    def initial_rto(self) -> contextlib.AbstractContextManager[synrto.InitialRto | None]:
        """The cgroup that sets SYNs' and SYN-ACKs' first retransmission (`uplink.initial_rto_ms`),
        or nothing; entered before the testbed, so it outlives the processes started in it."""
        ms = self.exp.uplink.initial_rto_ms
        return synrto.InitialRto(ms) if ms else contextlib.nullcontext()

    def testbed(self, groups: list | None = None, netem_dir: Path | None = None, scheduler: str = "kernel"):
        """A fresh testbed; with ``groups`` (``testbed.GroupPath``), a WAN one whose emulator
        keeps its configuration and counters in ``netem_dir``. A user-space ``scheduler``'s
        uplink is a plain token bucket (no bands), the kernel's the HTB tree."""
        tb = self._testbed_module()
        # Testbed run ids are 6 random hex digits (namespace names sf<id>-srv...), recorded in run.json.
        return tb.Testbed(run_id=tb.new_run_id(), **self.testbed_args(groups, netem_dir, scheduler))

    def testbed_args(
        self, groups: list | None = None, netem_dir: Path | None = None, scheduler: str = "kernel"
    ) -> dict[str, Any]:
        """`testbed.Testbed`'s keywords but the run id (`factors.testbed_args`)."""
        return factors.testbed_args(self.exp, self.bin, self.placement, groups, netem_dir, scheduler)

    def server_argv(
        self, tb: Any, policy: str, scheduler: str = "kernel", addr: str | None = None
    ) -> list[str]:
        """`shortfirst serve` on the testbed's server address (or `addr`: a farm's host)."""
        addr = addr or tb.server_addr
        argv = [
            str(self.bin),
            "serve",
            "--root",
            str(self.docroot),
            "--listen",
            f"{addr}:{self.exp.server.port}",
            "--policy",
            policy,
            "--admin",
            f"{addr}:{ADMIN_PORT}",
        ]
        if self.exp.server.cutoffs and policy not in ("fair", "srrt", "las"):
            argv += ["--cutoffs", self.exp.server.cutoffs]
        if self.exp.server.rrt_cutoffs and policy == "srrt":
            argv += ["--rrt-cutoffs", self.exp.server.rrt_cutoffs]
        if self.exp.server.send_buffer_bytes:
            argv += ["--send-buffer-bytes", str(self.exp.server.send_buffer_bytes)]
        argv += factors.scheduler_flags(scheduler, self.exp.uplink, self.exp.server)
        return argv + factors.serve_flags(self.exp.server) + list(self.exp.server.extra_args)

    def wait_listening(
        self,
        tb: Any,
        srv: subprocess.Popen,
        log: Path,
        addr: str | None = None,
        run: Callable[..., subprocess.CompletedProcess] | None = None,
    ) -> None:
        """Until a TCP connect to the server's port succeeds (the server is up): from the client
        namespace to the server's address, or by `run` (a namespace's `*_run`) to `addr`."""
        addr, run = addr or tb.server_addr, run or tb.client_run
        code = (
            "import socket,sys,time\n"
            f"end=time.monotonic()+{SERVER_START_TIMEOUT_S}\n"
            "while time.monotonic()<end:\n"
            "  try:\n"
            f"    socket.create_connection(({addr!r},{self.exp.server.port}),timeout=1).close()\n"
            "    sys.exit(0)\n"
            "  except OSError: time.sleep(0.05)\n"
            "sys.exit(1)\n"
        )
        r = run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=SERVER_START_TIMEOUT_S + 10
        )
        if r.returncode != 0:
            state = "exited with " + str(srv.returncode) if srv.poll() is not None else "still running"
            raise RunnerError(
                f"server not reachable within {SERVER_START_TIMEOUT_S:g} s ({state}); see {log}"
            )

    @staticmethod
    def set_rto_min(tb: Any, rto_min_ms: int) -> list[str]:
        """Set `rto_min` on every route of the server's uplink device (server namespace)."""
        shown = tb.server_run(
            ["ip", "route", "show", "dev", tb.server_dev], capture_output=True, text=True, timeout=20
        )
        done = []
        for line in shown.stdout.splitlines():
            words = [w for w in line.split() if w]
            if not words:
                continue
            argv = ["ip", "route", "change", *words, "dev", tb.server_dev, "rto_min", f"{rto_min_ms}ms"]
            r = tb.server_run(argv, capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                raise RunnerError(f"{shlex.join(argv)} failed: {r.stderr.strip()}")
            done.append(shlex.join(argv))
        if not done:
            raise RunnerError(f"no route on {tb.server_dev} to set rto_min on")
        return done

    @staticmethod
    def tcp_counters(tb: Any) -> dict[str, int]:
        """The server namespace's TCP counters (/proc/net/snmp Tcp, /proc/net/netstat TcpExt)."""
        r = tb.server_run(
            ["cat", "/proc/net/snmp", "/proc/net/netstat"], capture_output=True, text=True, timeout=20
        )
        out: dict[str, int] = {}
        for group, values in parse_proc_pairs(r.stdout).items():
            if group in ("Tcp", "TcpExt"):
                out.update({f"{group}.{k}": v for k, v in values.items()})
        return out

    def scrape_metrics(self, tb: Any) -> str:
        code = (
            "import urllib.request,sys\n"
            f"sys.stdout.write(urllib.request.urlopen('http://{tb.server_addr}:{ADMIN_PORT}/metrics',"
            "timeout=5).read().decode())\n"
        )
        try:
            r = tb.server_run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return "# metrics scrape timed out\n"
        return r.stdout if r.returncode == 0 else f"# metrics scrape failed: {r.stderr.strip()[-500:]}\n"

    @staticmethod
    def stop(proc: subprocess.Popen, timeout_s: float = SERVER_STOP_TIMEOUT_S) -> int | None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        return proc.returncode

    @staticmethod
    def health_probe(tb: Any) -> Callable[[], dict[str, Any]]:
        """What the sampler takes each second: the testbed's health sample and whether the
        server's admin endpoint answers (`admin_ok`, `admin_latency_s`), so a run shows its
        server alive, or not, throughout."""
        admin = getattr(tb, "admin_check", None)
        if admin is None:
            return tb.health_sample
        return lambda: {**tb.health_sample(), **admin(ADMIN_PORT)}

    def session(
        self,
        rdir: Path,
        policy: str,
        load_args: list[str],
        wait_s: float,
        on_tick: Callable[[float, HealthSampler], None] | None = None,
        groups: list[tuple[Any, list[int]]] | None = None,
        scheduler: str = "kernel",
    ) -> dict[str, Any]:
        """One server + one generator on a fresh testbed (a WAN one when ``groups`` are
        given: see wanrun; shaped for ``scheduler``); returns the run record.

        One run's lifecycle in order: set up (`_prepare`), start the server, watch (`_drive`),
        then collect and stop whatever started, in the order `_collect` gives, however the run
        ended.
        """
        rec: dict[str, Any] = {"started_utc": utc_now(), "policy": policy}
        t_wall = time.monotonic()
        group_paths = [g for g, _ in groups] if groups else None
        with (
            self.initial_rto() as rto,
            self.testbed(group_paths, rdir if groups else None, scheduler) as tb,
            open(rdir / "server.log", "w") as slog,
            open(rdir / "load.log", "w") as llog,
        ):
            s_argv, l_argv = self._prepare(tb, rto, rdir, policy, scheduler, load_args, groups, rec)
            srv = tb.server_popen(s_argv, stdout=slog, stderr=subprocess.STDOUT)
            live = _LiveRun()
            try:
                rec["status"] = self._drive(tb, srv, l_argv, llog, rdir, wait_s, on_tick, groups, live)
            except RunnerError as e:
                rec["status"] = f"failed: {e}"
            finally:
                self._collect(tb, srv, rdir, groups, rec, live)
        rec["finished_utc"] = utc_now()
        rec["wall_s"] = round(time.monotonic() - t_wall, 3)
        return rec

    def _prepare(
        self,
        tb: Any,
        rto: synrto.InitialRto | None,
        rdir: Path,
        policy: str,
        scheduler: str,
        load_args: list[str],
        groups: list[tuple[Any, list[int]]] | None,
        rec: dict[str, Any],
    ) -> tuple[list[str], list[str]]:
        """Records the testbed, sets its routes' rto_min and the launch cgroup, and writes
        commands.txt; returns the server's and the generator's argv."""
        rec["testbed"] = {
            "run_id": tb.run_id,
            "server_ns": tb.server_ns,
            "client_ns": list(tb.client_ns),
            "server_addr": tb.server_addr,
            "client_addrs": list(tb.client_addrs),
            "server_dev": tb.server_dev,
        }
        if self.exp.uplink.rto_min_ms:
            rec["route_commands"] = self.set_rto_min(tb, self.exp.uplink.rto_min_ms)
        if rto is not None:  # the server and the generator start in its cgroup
            tb.launch_prefix = rto.prefix()
            rec["initial_rto"] = rto.record()
        s_argv = self.server_argv(tb, policy, scheduler)
        if groups:
            load_args = [*load_args, *wanrun.source_addrs_flags(rdir, groups, tb.group_addrs)]
        l_argv = commands.load(
            self.bin, f"http://{tb.server_addr}:{self.exp.server.port}", out=rdir, extra=load_args
        )
        _write_commands(
            rdir / "commands.txt",
            [s_argv, l_argv],
            f"server in {tb.server_ns}, load generator in {tb.client_ns[0]}",
        )
        return s_argv, l_argv

    def _drive(
        self,
        tb: Any,
        srv: subprocess.Popen,
        l_argv: list[str],
        llog: Any,
        rdir: Path,
        wait_s: float,
        on_tick: Callable[[float, HealthSampler], None] | None,
        groups: list[tuple[Any, list[int]]] | None,
        live: _LiveRun,
    ) -> str:
        """Waits for the server, starts the sampler and the generator (kept in ``live``) and
        watches them until the generator ends, the server exits or ``wait_s`` passes; returns
        the run's status."""
        self.wait_listening(tb, srv, rdir / "server.log")
        if groups:
            live.rtts = wanrun.measure_rtts(tb, self.exp.server.port)
        live.tcp_before = self.tcp_counters(tb)
        t0 = time.monotonic()
        live.sampler = HealthSampler(self.health_probe(tb), t0)
        live.sampler.start()
        live.gen = gen = tb.client_popen(l_argv, stdout=llog, stderr=subprocess.STDOUT)
        deadline = t0 + wait_s
        while gen.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                gen.wait(timeout=1.0)  # a tick a second, or at once when the generator is done
            if srv.poll() is not None:
                break
            if on_tick:
                on_tick(time.monotonic() - t0, live.sampler)
        if gen.poll() is None:
            why = "server exited" if srv.poll() is not None else f"did not finish within {wait_s:g} s"
            self.stop(gen, 10)
            return f"failed: load generator {why}"
        if gen.returncode != 0:
            return f"failed: load generator exited with {gen.returncode} (see load.log)"
        if srv.poll() is not None:
            return f"failed: server exited with {srv.returncode} during the run (see server.log)"
        return "ok"

    def _collect(
        self,
        tb: Any,
        srv: subprocess.Popen,
        rdir: Path,
        groups: list[tuple[Any, list[int]]] | None,
        rec: dict[str, Any],
        live: _LiveRun,
    ) -> None:
        """After the run, in this order: the health samples, the generator's exit and the TCP
        counters' change, the uplink's counters, the server's metrics, the server's exit, and
        the WAN's records."""
        if live.sampler is not None:
            live.sampler.stop()
            live.sampler.write(rdir / "health.csv")
            rec["health_errors"] = live.sampler.errors
        if live.gen is not None:
            rec["load_rc"] = self.stop(live.gen, 10)
            write_json(rdir / "tcp_counters.json", counter_delta(live.tcp_before, self.tcp_counters(tb)))
        try:
            write_json(rdir / "uplink.json", tb.uplink_stats())
        except Exception as e:  # noqa: BLE001 - recorded, the run's logs are still useful
            rec["uplink_stats_error"] = f"{type(e).__name__}: {e}"
        if srv.poll() is None:
            write_atomic(rdir / "server_metrics.txt", self.scrape_metrics(tb))
        rec["server_rc"] = self.stop(srv)
        if groups:
            self.finish_wan(tb, rdir, groups, live.rtts, rec)

    @staticmethod
    def finish_wan(tb: Any, rdir: Path, groups: list, rtts: dict[str, Any], rec: dict[str, Any]) -> None:
        """Stops the emulator; writes netem.json and groups.json. A broken conservation
        (a packet neither out nor counted) fails the run: its figures would be unexplained."""
        netem = None
        try:
            netem = tb.stop_emulator()
            write_json(rdir / "netem.json", netem)
            if netem["conservation_violations"] and rec.get("status") == "ok":
                rec["status"] = "failed: the emulator lost packets it did not count (see netem.json)"
        except Exception as e:  # noqa: BLE001 - recorded, groups.json is still written
            rec["netem_error"] = f"{type(e).__name__}: {e}"
        wanrun.write_groups(rdir, wanrun.groups_record(groups, tb.group_addrs, rtts, netem))

    # ----------------------------------------------------------------------- calibration

    def calibration_trace(self, trace: Path, path: Path) -> float:
        """A trace of a size ladder, each fetch spaced so it runs alone; returns its length (s)."""
        exp = self.exp
        df = pd.read_csv(trace, usecols=["path", "size_bytes"]).drop_duplicates("size_bytes")
        sizes = np.sort(df["size_bytes"].to_numpy())
        targets = np.geomspace(max(sizes[0], 1), sizes[-1], exp.calibration.sizes)
        picked = sorted({int(sizes[np.abs(np.log(sizes) - np.log(t)).argmin()]) for t in targets})
        by_size = df.set_index("size_bytes")["path"]
        rng = np.random.default_rng(exp.seed)
        rows = []
        t = 0.5
        rate = exp.uplink.rate_bits_per_s
        for _ in range(exp.calibration.repeats):
            for s in rng.permutation(picked):
                rows.append((round(t, 6), by_size[int(s)], int(s)))
                t += CAL_GAP_FACTOR * 8.0 * s / rate + CAL_GAP_S
        write_atomic(path, pd.DataFrame(rows, columns=["time_s", "path", "size_bytes"]).to_csv(index=False))
        return t

    def calibrate(self, trace: Path) -> None:
        cdir = self.out / "calibration"
        rec_path = cdir / "run.json"
        if self.resume and rec_path.exists() and json.loads(rec_path.read_text()).get("status") == "ok":
            return
        if cdir.exists():
            shutil.rmtree(cdir)
        cdir.mkdir(parents=True)
        length = self.calibration_trace(trace, cdir / "trace.csv")
        _log(f"calibration: idle fetches of a size ladder, {length:.0f} s")
        load_args = [
            "--trace",
            str(cdir / "trace.csv"),
            "--model",
            "open",
            "--seed",
            str(self.exp.seed),
            "--quiet",
        ]  # at the trace's own times (no scaling): each fetch alone
        stage = make_stage("calibration")
        try:
            rec = self.session(stage or cdir, "fair", load_args, length + self.exp.run.drain_timeout_s + 30)
        finally:
            if stage is not None:
                unstage(stage, cdir)
        write_json(rec_path, rec)
        if rec["status"] != "ok":
            raise RunnerError(f"calibration {rec['status']}; logs in {cdir}")

    # ----------------------------------------------------------------------- matrix

    def capacity_bits_per_s(self) -> int:
        """What a load is a fraction of: the uplink's rate (a farm: every host's)."""
        return self.exp.uplink.rate_bits_per_s

    def trace_for_load(self, load: float) -> Path:
        """The prefix of the trace whose requested bits fill `duration_s` at `load` (cached).

        `shortfirst load --load ρ` scales the trace it is given so that its requested bits/s
        equal ρ × rate over the whole file. Handing it the whole (longer) trace and cutting with
        --duration would make the offered load that of the replayed prefix, which for a bursty
        trace is not ρ (measured: 0.976 offered at --load 0.9 on a 45 s prefix). The prefix of N
        requests with N the first index whose cumulative bits reach ρ × rate × duration_s lasts
        duration_s once scaled, so what is replayed is exactly what was scaled.
        """
        assert self.trace is not None
        path = self.trace.parent / f"trace-load{load:.2f}.csv"
        if path.exists():
            return path
        df = pd.read_csv(self.trace)
        need_bits = load * self.capacity_bits_per_s() * self.exp.run.duration_s
        n = int(np.searchsorted(np.cumsum(df["size_bytes"].to_numpy(dtype=float) * 8.0), need_bits)) + 1
        write_atomic(path, df.head(n).to_csv(index=False))
        return path

    def load_args(self, trace: Path, load: float, seed: int) -> list[str]:
        """`shortfirst load`'s flags of a run: `trace` replayed open or closed at `load` of
        `capacity_bits_per_s` (a farm: every host's) for the run's duration, the experiment's
        clients and timeout."""
        exp = self.exp
        return [
            "--trace", str(trace), "--model", exp.client.model, "--load", f"{load:g}",
            "--link-rate", str(self.capacity_bits_per_s()), "--duration", f"{exp.run.duration_s:g}",
            "--seed", str(seed), "--clients", str(exp.client.clients),
            "--timeout", f"{exp.client.timeout_s:g}", "--quiet", *factors.load_flags(exp.client),
        ]  # fmt: skip

    def for_spec(self, spec: RunSpec) -> Runner:
        """This runner with the experiment of `spec`'s setup (the same workload and trace)."""
        sub = copy.copy(self)
        sub.exp = self.exp.for_run(spec)
        return sub

    def run_one(self, spec: RunSpec, bar: tqdm | None) -> dict[str, Any]:
        """One run of the matrix, under its setup's experiment when it has one."""
        return (self.for_spec(spec) if spec.setup else self)._run_one(spec, bar)

    def _run_one(self, spec: RunSpec, bar: tqdm | None) -> dict[str, Any]:
        exp = self.exp
        final_dir = self.out / "runs" / spec.run_id
        if final_dir.exists():
            shutil.rmtree(final_dir)
        final_dir.mkdir(parents=True)
        rdir = make_stage(spec.run_id) or final_dir
        # A schedule varies the rate over the run: the whole trace is replayed, cut at the
        # duration (the prefix below is sized for a constant load).
        trace = self.trace if spec.schedule else self.trace_for_load(spec.load)
        load_args = self.load_args(trace, spec.load, spec.seed)
        if spec.schedule:
            load_args += ["--load-schedule", spec.schedule]

        def tick(elapsed: float, sampler: HealthSampler) -> None:
            if bar is not None:
                conns = sampler.latest("open_connections")
                bar.set_postfix_str(
                    f"{spec.run_id} {elapsed:.0f}/{exp.run.duration_s:.0f}s"
                    + (f" conns={conns:g}" if isinstance(conns, int | float) else "")
                )

        wait_s = exp.run.duration_s + exp.run.drain_timeout_s
        groups = wanrun.run_groups(exp, spec)
        try:
            rec = self.session(rdir, spec.policy, load_args, wait_s, tick, groups, spec.scheduler)
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
            # Testbed set-up or teardown failed: record it with the traceback, go on with the matrix.
            write_atomic(rdir / "runner_error.txt", traceback.format_exc())
            rec = {"status": f"failed: {type(e).__name__}: {e} (see runner_error.txt)", "policy": spec.policy}
        finally:
            if rdir != final_dir:
                unstage(rdir, final_dir)
        rdir = final_dir
        rec.update(run=spec.run_id, load=spec.load, repeat=spec.repeat, seed=spec.seed)
        if spec.schedule:
            rec["load_schedule"] = spec.schedule
        if spec.setup:
            rec["setup"] = spec.setup
        if spec.scheduler != "kernel":
            rec["scheduler"] = spec.scheduler
        if spec.path is not None:
            rec["path"] = {"label": spec.path.label, "rtt_ms": spec.path.rtt_ms, "loss": spec.path.loss,
                           "jitter_ms": spec.path.jitter_ms}  # fmt: skip
        if spec.rerun:  # its first run's arrivals, hence its ideals: not simulated again
            rec["rerun"] = True
        elif rec["status"] == "ok" and self.sim_available() and spec.policy in models.MODELLED_POLICIES:
            rec["sim"] = self.simulate(rdir, spec.policy, spec.scheduler)
        if (rdir / "requests.csv").exists():
            try:
                series.write_series(rdir)
            except Exception as e:  # noqa: BLE001 - recorded; the raw log is still there
                rec["series_error"] = f"{type(e).__name__}: {e}"
        write_json(rdir / "run.json", rec)
        return rec

    def sim_available(self) -> bool:
        """Whether the binary has `shortfirst sim` (checked once)."""
        if self._sim is None:
            try:
                r = subprocess.run(
                    [str(self.bin), "sim", "--help"], capture_output=True, text=True, timeout=30
                )
                self._sim = r.returncode == 0 and "--trace" in r.stdout
            except (OSError, subprocess.TimeoutExpired):
                self._sim = False
        return self._sim

    def simulate(self, rdir: Path, policy: str, scheduler: str = "kernel") -> str:
        """`shortfirst sim` on the run's own arrivals, into rdir/sim (body sizes) and rdir/sim-wire
        (wire costs): see idealsim.py and models.py."""
        return idealsim.simulate(self.bin, self.exp, rdir, policy, scheduler)

    def write_provenance(self) -> None:
        """DIR/provenance.json: the commit, the machine, the binary, the seeds, the placement."""
        extra = {
            "shortfirst_version": _version(self.bin),
            "seed": self.exp.seed,
            "workload_seed": self.exp.workload.seed,
            "placement": self.placement.to_dict(),
        }
        write_json(self.out / "provenance.json", collect(repo_root(), extra=extra))

    def run(self) -> dict[str, Any]:
        exp, out = self.exp, self.out
        out.mkdir(parents=True, exist_ok=True)
        if (out / "runs").exists() and any((out / "runs").iterdir()) and not self.resume:
            raise RunnerError(f"{out} already holds runs; use --resume to continue it, or a fresh --out")
        prev = out / "experiment.toml"
        if self.resume and prev.exists() and not resumable(load_experiment(prev).to_dict(), exp.to_dict()):
            raise RunnerError(
                f"--resume: {prev} differs from the experiment given (beyond added setups); use a fresh --out"
            )
        write_atomic(prev, exp.source or "")
        self.write_provenance()
        cleaned = self._testbed_module().cleanup_leftovers()
        if cleaned:
            _log(f"removed leftovers of an earlier crash: {', '.join(cleaned)}")
        _log(
            f"generating workload {exp.workload.kind} "
            f"({exp.workload.requests} requests, {exp.workload.files} files)"
        )
        self.trace = generate_workload(exp, out, self.bin)
        self.docroot = out / "workload" / "docroot"
        touch_docroot(self.docroot)
        cover = check_trace_covers(exp, self.trace)
        _log(
            f"trace: {cover['requests']} requests, mean {cover['mean_size_bytes']:.0f} B, "
            f"{cover['lasts_s_at_max_load']:.0f} s at load {cover['max_load']:g}"
        )
        self.calibrate(self.trace)
        todo = exp.matrix()
        failures = []
        # A bar redrawn every second only for a person at a terminal; in a log (make demo
        # piped to a file) one line per finished run instead.
        bar_on_terminal = self.progress and sys.stderr.isatty()
        with tqdm(total=len(todo), unit="run", disable=not bar_on_terminal, dynamic_ncols=True) as bar:
            for number, spec in enumerate(todo, start=1):
                rj = out / "runs" / spec.run_id / "run.json"
                if self.resume and rj.exists() and json.loads(rj.read_text()).get("status") == "ok":
                    bar.update(1)
                    continue
                rec = self.run_one(spec, bar if bar_on_terminal else None)
                if rec["status"] != "ok":
                    failures.append(f"{spec.run_id}: {rec['status']}")
                    _log(f"{spec.run_id}: {rec['status']}")
                elif self.progress and not bar_on_terminal:
                    _log(f"run {number}/{len(todo)} {spec.run_id}: ok")
                bar.update(1)
        summary = overload.build(out) if overload.applies(exp) else report.build(out)
        if failures:
            _log("failed runs: " + "; ".join(failures))
        return summary


def resumable(stored: dict[str, Any], given: dict[str, Any]) -> bool:
    """Whether `--resume` may continue a directory run with `stored` under `given`: the same
    experiment, or one that only adds setups (and may say so in its description). The runs of
    the setups both have were made under the same definition and are kept."""
    if stored == given:
        return True

    def rest(d: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in d.items() if k != "setups"}
        out["experiment"] = {k: v for k, v in d.get("experiment", {}).items() if k != "description"}
        return out

    old, new = stored.get("setups") or {}, given.get("setups") or {}
    return rest(stored) == rest(given) and all(new.get(name) == setup for name, setup in old.items())


def _version(bin_path: Path) -> str | None:
    try:
        r = subprocess.run(
            [str(bin_path), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return r.stdout.strip() or None


def check_can_run(bin_path: Path) -> None:
    """What every experiment runner needs before it builds anything: the binary and root."""
    if not bin_path.exists():
        raise RunnerError(f"{bin_path}: no such binary; build it with `make build`")
    if os.geteuid() != 0:
        raise RunnerError("running experiments needs root (network namespaces, qdiscs)")


def run_experiment(
    exp_path: Path,
    out: Path,
    bin_path: Path,
    resume: bool = False,
    progress: bool = True,
    overrides: list[str] | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    exp = load_experiment(exp_path, overrides)
    check_can_run(bin_path)
    return Runner(exp, out, bin_path.resolve(), resume=resume, progress=progress, placement=placement).run()
