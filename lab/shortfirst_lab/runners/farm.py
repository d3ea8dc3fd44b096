"""Farm experiment runner: the static runner's workload, trace prefixes and servers, on a farm
testbed (`testbed.farmbed`: C hosts, each `shortfirst serve` behind its own uplink, HAProxy in
the front namespace, the load generator behind it), every run simulated as a farm::

    DIR/experiment.toml, DIR/provenance.json
    DIR/workload/{docroot/,trace.csv,...}     generated once (`static.generate_workload`)
    DIR/farm/sizes.map, sizes.{sita,roundrobin,leastconn}.cfg, commands.txt, map.log
                                              `shortfirst farm map` once: the map of every file
                                              to its SITA-E host (cutoffs from the trace's
                                              requests) and HAProxy's three configurations
    DIR/runs/<dispatch>-<arm>-load<ρ>-rep<k>/
        requests.csv, summary.json, received.csv   shortfirst load's, through HAProxy
        host<i>.access.log, host<i>.log       host i's access log (what it served) and output
        haproxy.log, load.log, commands.txt
        uplink.json                           the hosts' qdisc counters at the end, summed band
                                              by band, each host's under `hosts`
        health.csv                            1 Hz, as the static runner's (the front's
                                              connections and accept queue, the hosts' bands
                                              summed, the server processes' CPU and memory),
                                              plus each host's uplink bytes and backlog
                                              (`host_bytes.<i>`, `host_backlog_packets.<i>`)
        sim/, sim-wire/                       the run's ideals (`idealsim.simulate` with a
                                              `Farm`): `shortfirst sim --servers C --dispatch D`
                                              on the run's own arrivals, bodies or wire costs as
                                              service; roundrobin → round-robin, leastconn →
                                              least-connections, sita-e → sita:<the map's cutoffs>
        run.json                              status, dispatch, arm, exit codes
        groups.json, source_addrs.csv,        with client groups: as the static runner's
        netem.json, netem.toml                (`wanrun`): each group's clients, path, RTT
                                              measured to the front, the emulator's counters

HAProxy is started with `-db` (in the foreground, stopped at the run's end) and `-n
HAPROXY_MAXCONN`; its configurations set no per-server limit, so it queues nothing: every
request is passed on at once, as the simulator's dispatch does. The summary and the page are
`analysis.farmreport`'s.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

from .. import commands
from ..analysis import farmreport, idealsim, models
from ..kit import utc_now, write_atomic, write_json
from ..spec.farm import DISPATCHES, FarmExperiment, FarmRun
from ..testbed.placement import Placement
from . import wanrun
from .health import HealthSampler
from .stage import make_stage, touch_docroot, unstage
from .static import (
    Runner,
    RunnerError,
    _log,
    _write_commands,
    check_can_run,
    check_trace_covers,
    generate_workload,
)

#: HAProxy's connection limit (`haproxy -n`, over the configuration's 20,000): HAProxy needs two
#: file descriptors a connection and refuses to start when the hard limit on them (20,000 on the
#: lab machine) is below that. An open-model run at load 0.9 keeps hundreds in flight, not thousands.
HAPROXY_MAXCONN = 8192
#: HAProxy's configuration file of each dispatch (`shortfirst farm map` writes them beside the map).
CONFIGS = {
    "roundrobin": "sizes.roundrobin.cfg",
    "leastconn": "sizes.leastconn.cfg",
    "sita-e": "sizes.sita.cfg",
}


class FarmRunner(Runner):
    """`Runner` on a farm: C hosts behind HAProxy; the load is per host."""

    def __init__(
        self,
        farm: FarmExperiment,
        out: Path,
        bin_path: Path,
        haproxy: Path,
        resume: bool = False,
        progress: bool = True,
        placement: Placement | None = None,
    ):
        super().__init__(farm.exp, out, bin_path, resume=resume, progress=progress, placement=placement)
        self.farm = farm
        self.haproxy = haproxy
        self.cutoffs: list[int] = []

    def capacity_bits_per_s(self) -> int:
        return self.exp.uplink.rate_bits_per_s * self.farm.hosts

    def farm_testbed(self, scheduler: str, groups: list | None = None, netem_dir: Path | None = None):
        """A fresh farm testbed, each host's uplink shaped for `scheduler`; with `groups`, the
        clients behind the WAN emulator (as `Runner.testbed`)."""
        from ..testbed.bed import new_run_id
        from ..testbed.farmbed import FarmTestbed

        args = self.testbed_args(groups, netem_dir, scheduler)
        return FarmTestbed(run_id=new_run_id(), n_hosts=self.farm.hosts, **args)

    # ----------------------------------------------------------------------- the map

    def write_map(self) -> None:
        """`shortfirst farm map` into DIR/farm (hosts' and front's addresses are the testbed's,
        the same in every run), each configuration checked by `haproxy -c`; reads the cutoffs."""
        from ..testbed.farmbed import front_addr, host_addrs

        fdir = self.out / "farm"
        fdir.mkdir(parents=True, exist_ok=True)
        port = self.exp.server.port
        assert self.trace is not None and self.docroot is not None
        argv = [str(self.bin), "farm", "map", "--root", str(self.docroot), "--hosts", str(self.farm.hosts)]
        argv += ["--host-addrs", ",".join(f"{a}:{port}" for a in host_addrs(self.farm.hosts))]
        argv += [
            "--listen",
            f"{front_addr()}:{port}",
            "--trace",
            str(self.trace),
            "--out",
            str(fdir / "sizes.map"),
        ]
        checks = [[str(self.haproxy), "-c", "-q", "-f", str(fdir / CONFIGS[d])] for d in self.farm.dispatch]
        _write_commands(fdir / "commands.txt", [argv, *checks])
        log = []
        for a in [argv, *checks]:
            r = subprocess.run(a, capture_output=True, text=True, timeout=300, check=False)
            log.append(r.stdout + r.stderr)
            if r.returncode != 0:
                write_atomic(fdir / "map.log", "".join(log))
                raise RunnerError(f"`{' '.join(a[:3])}` failed (exit {r.returncode}); see {fdir / 'map.log'}")
        write_atomic(fdir / "map.log", "".join(log))
        self.cutoffs, _ = farmreport.read_map(fdir / "sizes.map")

    # ----------------------------------------------------------------------- one run

    def run_farm(self, run: FarmRun) -> dict[str, Any]:
        """One run of the farm's matrix, staged as the static runner's; then its simulation."""
        exp, spec = self.exp, run.spec
        final_dir = self.out / "runs" / run.run_id
        if final_dir.exists():
            shutil.rmtree(final_dir)
        final_dir.mkdir(parents=True)
        rdir = make_stage(run.run_id) or final_dir
        load_args = self.load_args(self.trace_for_load(spec.load), spec.load, spec.seed)
        try:
            rec = self.farm_session(rdir, run, load_args, exp.run.duration_s + exp.run.drain_timeout_s)
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
            write_atomic(rdir / "runner_error.txt", traceback.format_exc())
            rec = {"status": f"failed: {type(e).__name__}: {e} (see runner_error.txt)", "policy": spec.policy}
        finally:
            if rdir != final_dir:
                unstage(rdir, final_dir)
        rec.update(run=run.run_id, dispatch=run.dispatch, load=spec.load, repeat=spec.repeat, seed=spec.seed)
        if rec["status"] == "ok" and spec.policy in models.MODELLED_POLICIES:
            farm = idealsim.Farm(self.farm.hosts, DISPATCHES[run.dispatch], tuple(self.cutoffs))
            rec["sim"] = idealsim.simulate(self.bin, exp, final_dir, spec.policy, spec.scheduler, farm)
        write_json(final_dir / "run.json", rec)
        return rec

    def farm_session(self, rdir: Path, run: FarmRun, load_args: list[str], wait_s: float) -> dict[str, Any]:
        """The hosts, HAProxy and the generator on a fresh farm testbed (the clients behind the
        WAN emulator when the experiment has client groups: see `wanrun`); the run's record."""
        spec = run.spec
        rec: dict[str, Any] = {"started_utc": utc_now(), "policy": spec.policy, "scheduler": spec.scheduler}
        t_wall = time.monotonic()
        groups = wanrun.run_groups(self.exp, spec)
        paths = [g for g, _ in groups] if groups else None
        with contextlib.ExitStack() as stack:
            tb = stack.enter_context(self.farm_testbed(spec.scheduler, paths, rdir if groups else None))
            logs = [stack.enter_context(open(rdir / f"host{i}.log", "w")) for i in range(self.farm.hosts)]
            hlog = stack.enter_context(open(rdir / "haproxy.log", "w"))
            llog = stack.enter_context(open(rdir / "load.log", "w"))
            rec["testbed"] = {"run_id": tb.run_id, "front_ns": tb.server_ns, "host_ns": list(tb.host_ns)}
            s_argvs, h_argv, l_argv = self._argvs(tb, rdir, run, load_args, groups)
            procs = [
                tb.host_popen(i, a, stdout=logs[i], stderr=subprocess.STDOUT) for i, a in enumerate(s_argvs)
            ]
            hap: subprocess.Popen | None = None
            gen: subprocess.Popen | None = None
            sampler: HealthSampler | None = None
            rtts: dict[str, Any] = {}
            try:
                for i, (p, addr) in enumerate(zip(procs, tb.host_addrs, strict=True)):
                    self.wait_listening(tb, p, rdir / f"host{i}.log", addr=addr, run=tb.server_run)
                hap = tb.server_popen(h_argv, stdout=hlog, stderr=subprocess.STDOUT)
                self.wait_listening(tb, hap, rdir / "haproxy.log")
                if groups:  # through HAProxy: each group's path to the front
                    rtts = wanrun.measure_rtts(tb, self.exp.server.port)
                sampler = HealthSampler(tb.health_sample, time.monotonic())
                sampler.start()
                gen = tb.client_popen(l_argv, stdout=llog, stderr=subprocess.STDOUT)
                rec["status"] = self._watch(gen, [*procs, hap], wait_s)
            except RunnerError as e:
                rec["status"] = f"failed: {e}"
            finally:
                if sampler is not None:
                    sampler.stop()
                    sampler.write(rdir / "health.csv")
                    rec["health_errors"] = sampler.errors
                rec["load_rc"] = None if gen is None else self.stop(gen, 10)
                with contextlib.suppress(Exception):  # recorded by its absence; the logs stand
                    write_json(rdir / "uplink.json", tb.uplink_stats())
                rec["haproxy_rc"] = None if hap is None else self.stop(hap)
                rec["host_rc"] = [self.stop(p) for p in procs]
                if groups:
                    self.finish_wan(tb, rdir, groups, rtts, rec)
        rec["finished_utc"] = utc_now()
        rec["wall_s"] = round(time.monotonic() - t_wall, 3)
        return rec

    def _argvs(
        self, tb: Any, rdir: Path, run: FarmRun, load_args: list[str], groups: list | None
    ) -> tuple[list[list[str]], list[str], list[str]]:
        """The hosts', HAProxy's and the generator's argv (with groups, each client bound to its
        group's address: `source_addrs.csv`), written to commands.txt."""
        spec = run.spec
        s_argvs = [
            self.server_argv(tb, spec.policy, spec.scheduler, addr=a)
            + ["--access-log", str(rdir / f"host{i}.access.log")]
            for i, a in enumerate(tb.host_addrs)
        ]
        h_argv = [str(self.haproxy), "-db", "-n", str(HAPROXY_MAXCONN)]
        h_argv += ["-f", str(self.out / "farm" / CONFIGS[run.dispatch])]
        if groups:
            load_args = [*load_args, *wanrun.source_addrs_flags(rdir, groups, tb.group_addrs)]
        url = f"http://{tb.server_addr}:{self.exp.server.port}"
        l_argv = commands.load(self.bin, url, out=rdir, extra=load_args)
        note = f"hosts in {', '.join(tb.host_ns)}; HAProxy in {tb.server_ns}; load in {tb.client_ns[0]}"
        _write_commands(rdir / "commands.txt", [*s_argvs, h_argv, l_argv], note)
        return s_argvs, h_argv, l_argv

    @staticmethod
    def _watch(gen: subprocess.Popen, servers: list[subprocess.Popen], wait_s: float) -> str:
        """Until the generator ends, a server or HAProxy exits, or `wait_s` passes: the status."""
        deadline = time.monotonic() + wait_s
        while gen.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                gen.wait(timeout=1.0)
            if any(p.poll() is not None for p in servers):
                break
        gone = [i for i, p in enumerate(servers) if p.poll() is not None]
        if gone:
            names = ["HAProxy" if i == len(servers) - 1 else f"host {i}" for i in gone]
            return f"failed: {', '.join(names)} exited during the run (see its log)"
        if gen.poll() is None:
            return f"failed: load generator did not finish within {wait_s:g} s"
        if gen.returncode != 0:
            return f"failed: load generator exited with {gen.returncode} (see load.log)"
        return "ok"

    # ----------------------------------------------------------------------- the matrix

    def run(self) -> dict[str, Any]:
        exp, out = self.exp, self.out
        out.mkdir(parents=True, exist_ok=True)
        if (out / "runs").exists() and any((out / "runs").iterdir()) and not self.resume:
            raise RunnerError(f"{out} already holds runs; use --resume to continue it, or a fresh --out")
        write_atomic(out / "experiment.toml", exp.source or "")
        self.write_provenance()
        self.trace = generate_workload(exp, out, self.bin)
        self.docroot = out / "workload" / "docroot"
        touch_docroot(self.docroot)
        cover = check_trace_covers(exp, self.trace, self.capacity_bits_per_s())
        _log(
            f"trace: {cover['requests']} requests, "
            f"{cover['lasts_s_at_max_load']:.0f} s at load {cover['max_load']:g} per host"
        )
        self.write_map()
        _log(f"map: SITA-E cutoffs {self.cutoffs} bytes over {self.farm.hosts} hosts")
        todo = self.farm.matrix()
        for number, run in enumerate(todo, start=1):
            rj = out / "runs" / run.run_id / "run.json"
            if self.resume and rj.exists() and json.loads(rj.read_text()).get("status") == "ok":
                continue
            rec = self.run_farm(run)
            _log(
                f"run {number}/{len(todo)} {run.run_id}: {rec['status']}"
                + (f", sim {rec['sim']}" if "sim" in rec else "")
            )
        return farmreport.build(out)


def resimulate(out: Path, farm: FarmExperiment, bin_path: Path) -> dict[str, str]:
    """Both ideals of every ok run of a farm directory again, from its raw logs and its map;
    per run the status (also written to its run.json as ``sim``)."""
    cutoffs, _ = farmreport.read_map(out / "farm" / "sizes.map")
    done: dict[str, str] = {}
    for run in farm.matrix():
        rdir = out / "runs" / run.run_id
        if not (rdir / "run.json").exists() or not (rdir / "requests.csv").exists():
            continue
        rec = json.loads((rdir / "run.json").read_text())
        if rec.get("status") != "ok" or run.spec.policy not in models.MODELLED_POLICIES:
            continue
        spec, sim_farm = run.spec, idealsim.Farm(farm.hosts, DISPATCHES[run.dispatch], tuple(cutoffs))
        rec["sim"] = idealsim.simulate(bin_path, farm.exp, rdir, spec.policy, spec.scheduler, sim_farm)
        write_json(rdir / "run.json", rec)
        done[run.run_id] = rec["sim"]
    return done


def run_farm_experiment(
    farm: FarmExperiment,
    out: Path,
    bin_path: Path,
    resume: bool = False,
    progress: bool = True,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """Run a validated farm experiment into `out`; the summary."""
    check_can_run(bin_path)
    haproxy = shutil.which(farm.haproxy)
    if haproxy is None:
        raise RunnerError(f"farm.haproxy {farm.haproxy!r}: not found; install HAProxy (make apt)")
    runner = FarmRunner(farm, out, bin_path.resolve(), Path(haproxy), resume, progress, placement)
    return runner.run()
