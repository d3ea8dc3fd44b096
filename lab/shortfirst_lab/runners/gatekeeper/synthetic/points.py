"""One point of the synthetic bench: the synthetic upstream started from the bench's options,
the gatekeeper in front of it (or not, for `direct`), the load driven through, the figures
and the upstream's work counters collected.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from ..backends.base import Served, serve
from ..backends.synthetic import COSTLIEST, SyntheticBackend
from ..run import Gate, drive, front
from ..summary import summarize
from ..timeline import Sampler, scrape, scrape_upstream_work, timeline_summary


class Bench:
    """The bench's options and scratch directory, and the processes of one point started
    from them (each stopped when its `with` block ends)."""

    def __init__(self, a: argparse.Namespace, work: Path):
        self.a = a
        self.work = work
        self.bin = str(Path(a.bin).resolve())
        self.counter = 0
        #: The --compare-max-queue-wait runs, if any (filled by run_models).
        self.comparison: dict | None = None

    def backend(self) -> SyntheticBackend:
        a = self.a
        return SyntheticBackend(self.bin, a.scale, a.cpus, a.slots, a.thrash, self.work / "mix.csv")

    def log(self, name: str) -> Path:
        self.counter += 1
        return self.work / f"{name}-{self.counter}.log"

    def upstream(self) -> contextlib.AbstractContextManager[Served]:
        return serve(self.backend(), self.log("upstream"))

    def proxy(
        self,
        upstream: str,
        policy: str,
        capacity: str,
        binary: str | None = None,
        max_queue_wait_s: float | None = None,
        extra: list[str] | None = None,
    ) -> contextlib.AbstractContextManager[Gate]:
        """A gatekeeper (`policy`) in front of `upstream` with the bench's settings; `direct`
        yields the upstream itself."""
        flags = {
            "capacity": capacity,
            "max_in_flight": self.a.max_in_flight or None,
            "max_queue_wait_s": max_queue_wait_s,
            "max_charge_share": self.a.max_charge_share_f,
            "extra": [*(extra or []), *self.a.gatekeeper_args.split()],
        }
        binary = str(Path(binary).resolve()) if binary else self.bin
        return front(binary, upstream, policy, self.log("proxy"), **flags)

    def load(
        self, url: str, model: str, trace: Path, tag: str, duration_s: float, extra: list[str] | None = None
    ) -> tuple[Path, float]:
        out = self.work / tag
        wall = drive(
            self.bin,
            url,
            out,
            duration_s=duration_s,
            timeout_s=self.a.timeout,
            trace=trace,
            model=model,
            seed=self.a.seed,
            extra=extra or [],
        )
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
        with self.upstream() as up:
            with self.proxy(up.url, config, capacity, max_queue_wait_s=max_queue_wait_s) as g:
                with self.sampling(up.port, g.admin_port) as sampler:
                    out, wall = self.load(g.url, model, trace, tag, a.duration)
                metrics = None if g.admin_port is None else scrape(g.admin_port)
            upstream_work = scrape_upstream_work(up.port)
        backend = self.backend()
        s = summarize(out, a.warmup, a.duration, wall, a.timeout, backend.cost_ms, backend.type_of)
        s["gatekeeper"] = metrics
        s["max_queue_wait_s"] = None if config == "direct" else max_queue_wait_s
        s["upstream_work"] = upstream_work
        if sampler is not None:
            s["timeline"] = sampler.rows
            s["timeline_summary"] = timeline_summary(
                sampler.rows, a.warmup, a.duration, a.cpus, a.max_in_flight or 10**9
            )
            print(f"  {tag} timeline: {json.dumps(s['timeline_summary'])}", file=sys.stderr, flush=True)
        _print(tag, s, upstream_work)
        return s

    @contextlib.contextmanager
    def sampling(self, up_port: int, admin_port: int | None) -> Iterator[Sampler | None]:
        """The timeline's sampler during the load (with --sample-ms), else nothing."""
        if not self.a.sample_ms:
            yield None
            return
        with Sampler(up_port, admin_port, self.a.sample_ms / 1e3) as sampler:
            yield sampler


def _print(tag: str, s: dict, upstream_work: dict) -> None:
    """A point's line on stderr."""
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
