"""Starting the pieces of one point: the synthetic upstream, a gatekeeper in front of it, the
load generator; and one run of a configuration end to end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

from ... import commands
from ...kit import Child, free_port, wait_port
from .summary import summarize
from .timeline import Sampler, scrape, scrape_upstream_work, timeline_summary
from .workload import COSTLIEST


class Bench:
    """The bench's options and scratch directory, and the processes of one point started
    from them (each a `kit.Child`, stopped when its `with` block ends)."""

    def __init__(self, a: argparse.Namespace, work: Path):
        self.a = a
        self.work = work
        self.bin = str(Path(a.bin).resolve())
        self.counter = 0
        #: The --compare-max-queue-wait runs, if any (filled by run_models).
        self.comparison: dict | None = None

    def upstream(self) -> tuple[Child, int]:
        port = free_port()
        a = self.a
        self.counter += 1
        argv = commands.synthetic_upstream(
            self.bin,
            listen=f"127.0.0.1:{port}",
            scale=a.scale,
            cpus=a.cpus,
            slots=a.slots,
            thrash=a.thrash,
            write_mix=self.work / "mix.csv",
        )
        p = Child(argv, self.work / f"upstream-{self.counter}.log")
        wait_port(port)
        return p, port

    def proxy(
        self,
        up_port: int,
        policy: str,
        capacity: str,
        binary: str | None = None,
        max_queue_wait_s: float | None = None,
        extra: list[str] | None = None,
    ) -> tuple[Child, int, int]:
        port, admin = free_port(), free_port()
        self.counter += 1
        argv = commands.gatekeeper(
            str(Path(binary).resolve()) if binary else self.bin,
            listen=f"127.0.0.1:{port}",
            upstream=f"http://127.0.0.1:{up_port}",
            policy=policy,
            capacity=capacity,
            admin=f"127.0.0.1:{admin}",
            max_in_flight=self.a.max_in_flight or None,
            max_queue_wait_s=max_queue_wait_s,
            max_charge_share=self.a.max_charge_share_f,
            extra=[*(extra or []), *self.a.gatekeeper_args.split()],
        )
        p = Child(argv, self.work / f"proxy-{self.counter}.log")
        wait_port(port)
        return p, port, admin

    def load(
        self, port: int, model: str, trace: Path, tag: str, duration_s: float, extra: list[str] | None = None
    ) -> tuple[Path, float]:
        out = self.work / tag
        argv = commands.load(
            self.bin,
            f"http://127.0.0.1:{port}",
            trace=trace,
            out=out,
            model=model,
            duration_s=duration_s,
            timeout_s=self.a.timeout,
            seed=self.a.seed,
            quiet=True,
            extra=extra or [],
        )
        t0 = time.monotonic()
        r = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=duration_s + self.a.timeout + 120
        )
        wall = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError(f"shortfirst load failed ({' '.join(argv)}):\n{r.stderr[-3000:]}")
        return out, wall

    def one_run(
        self,
        config: str,
        capacity: str,
        model: str,
        trace: Path,
        tag: str,
        max_queue_wait_s: float | None = None,
    ) -> dict:
        """One point. `max_queue_wait_s`: the gatekeeper's --max-queue-wait (None: no
        limit); direct runs ignore it."""
        a = self.a
        up, up_port = self.upstream()
        with up:
            metrics = None
            sampling = Sampler(up_port, None, a.sample_ms / 1e3) if a.sample_ms else contextlib.nullcontext()
            if config == "direct":
                with sampling:
                    out, wall = self.load(up_port, model, trace, tag, a.duration)
            else:
                px, port, admin = self.proxy(up_port, config, capacity, max_queue_wait_s=max_queue_wait_s)
                with px:
                    if a.sample_ms:
                        sampling.admin_port = admin
                    with sampling:
                        out, wall = self.load(port, model, trace, tag, a.duration)
                    metrics = scrape(admin)
            upstream_work = scrape_upstream_work(up_port)
        s = summarize(out, a.warmup, a.duration, wall, a.scale, a.timeout)
        s["gatekeeper"] = metrics
        s["max_queue_wait_s"] = None if config == "direct" else max_queue_wait_s
        s["upstream_work"] = upstream_work
        if a.sample_ms:
            s["timeline"] = sampling.rows
            s["timeline_summary"] = timeline_summary(
                sampling.rows, a.warmup, a.duration, a.cpus, a.max_in_flight or 10**9
            )
            print(f"  {tag} timeline: {json.dumps(s['timeline_summary'])}", file=sys.stderr, flush=True)
        costly = s["per_type"].get(COSTLIEST, {}).get("mean_response_ms") or float("nan")
        mean = s["mean_response_ms"] or float("nan")
        print(
            f"  {tag:<34} {s['throughput_per_s']:7.1f} req/s {s['work_per_s']:5.2f} work/s  mean "
            f"{mean:8.1f} ms  {COSTLIEST} {costly:8.1f} ms  "
            f"timeouts {s['timeouts']} errors {s['errors']}  "
            f"upstream work wasted {100 * (upstream_work['wasted_fraction'] or 0):.1f}%",
            file=sys.stderr,
            flush=True,
        )
        return s
