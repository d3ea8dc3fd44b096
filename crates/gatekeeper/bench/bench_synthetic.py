#!/usr/bin/env python3
"""Benchmark: shortfirst gatekeeper in front of the synthetic TPC-W-like upstream.

Everything runs on 127.0.0.1 with ephemeral ports:
1. `shortfirst gatekeeper synthetic-upstream` (costs 1 ms .. 2 s times --scale, in the
   proportions of the Gatekeeper paper's Table 1; throughput collapses past --slots).
2. `shortfirst gatekeeper calibrate` finds the capacity with peak throughput (fifo).
3. `shortfirst load` drives, for each configuration (direct, fifo, sjf, sjf-aging:X),
   a closed model (N users, exponential think time) at several N, and an open model
   (Poisson arrivals) at several rates. Upstream and proxy are restarted for every run so
   runs do not leak into each other; the first --warmup seconds of each run are dropped.
4. Proxy overhead: direct vs through the proxy at low load (one cheap type), same run.

Writes one JSON file (temp file + rename). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import benchlib  # noqa: E402
from benchlib import (  # noqa: E402
    BENCH_LOCK,
    HALT_POLL,
    bench_lock_held_by_ancestor,
    free_port,
    git_commit,
    machine,
    read_halt_poll,
    wait_port,
)

POLICIES = ["fifo", "sjf", "sjf-aging:1", "sjf-aging:2", "sjf-aging:5"]
#: The most expensive type with a usable sample (admin_response is 0.09% of the mix).
COSTLIEST = "best_sellers"


class Proc:
    """A child process that is always terminated (by its own pid) on exit."""

    def __init__(self, argv: list[str], log: Path):
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def read_mix(path: Path) -> list[tuple[str, float]]:
    with open(path) as f:
        return [(r["path"], float(r["weight"])) for r in csv.DictReader(f)]


# The paper's Table 1 no-load costs (ms), as in crates/gatekeeper/src/synthetic.rs.
TABLE1_MS = {
    "admin_request": 2.84,
    "admin_response": 2476.75,
    "best_sellers": 1205.01,
    "buy_confirm": 15.71,
    "buy_request": 5.26,
    "execute_search": 73.27,
    "home": 1.83,
    "new_products": 13.82,
    "order_display": 7.43,
    "order_inquiry": 0.75,
    "product_detail": 0.91,
    "search_request": 0.22,
    "shopping_cart": 0.34,
}


def type_cost_ms(path: str, scale: float) -> float:
    name = path.rsplit("/", 1)[-1]
    return min(max(TABLE1_MS[name], 1.0), 2000.0) * scale if name in TABLE1_MS else 0.0


def write_trace(path: Path, mix, rate_per_s: float, duration_s: float, seed: int) -> int:
    """Poisson arrivals at `rate_per_s`, paths drawn from the mix. Returns the row count."""
    rng = random.Random(seed)
    paths = [p for p, _ in mix]
    weights = [w for _, w in mix]
    t, n = 0.0, 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write("time_s,path,size_bytes\n")
        while True:
            t += rng.expovariate(rate_per_s)
            if t >= duration_s:
                break
            f.write(f"{t:.6f},{rng.choices(paths, weights)[0]},0\n")
            n += 1
    os.replace(tmp, path)
    return n


def summarize(
    run_dir: Path, warmup_s: float, duration_s: float, wall_s: float, scale: float, timeout_s: float
) -> dict:
    """Throughput and response times from requests.csv.

    - Throughput: responses completed (200) inside the measurement window
      [warmup, duration], whenever they were sent, per second of window. Cost-weighted
      throughput: the same completions weighted by their type's base cost (the synthetic
      backend's work, in seconds), per second: backend work done per second (at most
      --cpus when every processor serves useful work).
    - Response times: requests *scheduled* inside the window. A request that timed out (or
      never completed) counts with its timeout as response time, a lower bound of the truth,
      in `mean_response_ms` (and per type); `mean_response_ms_completed` is over completed
      requests only. Dropping timeouts would hide exactly the requests a policy starves.
    """
    with open(run_dir / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    window = max(duration_s - warmup_s, 1e-9)
    done_in_window = work_s = 0.0
    rts, rts_done, per_type, timeouts, errors = [], [], {}, 0, 0
    by_client: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        name = r["path"].rsplit("/", 1)[-1]
        sched = float(r["scheduled_s"] or 0)
        done = r.get("done_s") or ""
        ok = r["outcome"] == "ok" and r["status"] == "200" and done != ""
        if ok and warmup_s <= float(done) <= duration_s:
            done_in_window += 1
            work_s += type_cost_ms(r["path"], scale) / 1e3
        # When the user was free again: the response, the error, or giving up.
        end = float(done) if done != "" else sched + timeout_s
        by_client.setdefault(r.get("client", ""), []).append((sched, end))
        if not (warmup_s <= sched < duration_s):
            continue
        if ok:
            rt = float(done) - sched
            rts_done.append(rt)
        elif r["outcome"] in ("timeout", "aborted"):
            rt = timeout_s
            timeouts += 1
        else:
            # Refused, reset, 5xx: the time the user waited for the failure.
            errors += 1
            rt = end - sched
        rts.append(rt)
        t = per_type.setdefault(name, {"rts": [], "rts_ok": [], "timeouts": 0, "errors": 0})
        t["rts"].append(rt)
        if ok:
            t["rts_ok"].append(rt)
        t["timeouts"] += 1 if r["outcome"] in ("timeout", "aborted") else 0
        t["errors"] += 0 if ok or r["outcome"] in ("timeout", "aborted") else 1

    def mean_ms(v):
        return 1e3 * sum(v) / len(v) if v else None

    # Little's law for a closed loop, from the logs: every request that ended in the window
    # (any outcome) is one cycle of a user: respond (R), then think (Z) until the next send.
    ended = [(sch, end) for reqs in by_client.values() for sch, end in reqs if warmup_s <= end < duration_s]
    thinks = []

    def clipped(a: float, b: float) -> float:
        return max(0.0, min(b, duration_s) - max(a, warmup_s))

    waiting_s = thinking_s = 0.0
    for reqs in by_client.values():
        reqs.sort()
        for (_, end), (next_sched, _) in zip(reqs, reqs[1:], strict=False):
            if warmup_s <= end < duration_s:
                thinks.append(max(0.0, next_sched - end))
            thinking_s += clipped(end, next_sched)
        waiting_s += sum(clipped(sch, end) for sch, end in reqs)
    x_all = len(ended) / window
    r_all = sum(e - s for s, e in ended) / len(ended) if ended else 0.0
    z = sum(thinks) / len(thinks) if thinks else 0.0
    littles = {
        "x_per_s": x_all,
        "r_s": r_all,
        "z_s": z,
        "n_from_logs": x_all * (r_all + z),
        "waiting_avg": waiting_s / window,
        "thinking_avg": thinking_s / window,
        "definition": "X = requests that ended in the window (any outcome) per second; R = their "
        "mean time from scheduled send to end (response, error, or giving up); Z = mean time "
        "from a user's request ending to its next send. Closed loop: N = X (R + Z). "
        "waiting_avg / thinking_avg: time-average number of users waiting / thinking in the "
        "window (their sum is N up to the generator's lateness). X R falls short of "
        "waiting_avg when requests outlast the window (they end after it), so a ratio well "
        "below 1 means the window is too short for the longest waits, not a broken loop.",
    }

    ordered = sorted(rts)
    return {
        "accounting": {
            "full": {
                "mean_response_ms": mean_ms(rts),
                "requests": len(rts),
                "definition": "every request scheduled in the window: completed ones at their "
                "response time, errors at the time they took, timed-out ones at the client "
                "timeout (a lower bound: the user gave up then)",
            },
            "paper": {
                "mean_response_ms": mean_ms(rts_done),
                "throughput_per_s": done_in_window / window,
                "requests": len(rts_done),
                "excluded_timeouts": timeouts,
                "excluded_errors": errors,
                "timeout_s": timeout_s,
                "definition": "successful requests only (Elnikety et al. 2004, section 4: failed "
                "or timed-out requests are in neither throughput nor response time)",
            },
        },
        "littles_law": littles,
        "throughput_per_s": done_in_window / window,
        "median_response_ms": 1e3 * ordered[len(ordered) // 2] if ordered else None,
        "work_per_s": work_s / window,
        "mean_response_ms": mean_ms(rts),
        "mean_response_ms_completed": mean_ms(rts_done),
        "requests": len(rts),
        "timeouts": timeouts,
        "errors": errors,
        "per_type": {
            k: {
                "n": len(v["rts"]),
                "timeouts": v["timeouts"],
                "errors": v["errors"],
                "mean_response_ms": mean_ms(v["rts"]),
                "mean_response_ms_successful": mean_ms(v["rts_ok"]),
            }
            for k, v in sorted(per_type.items())
        },
        "wall_s": wall_s,
    }


def scrape(admin_port: int) -> dict:
    """Global gauges/counters and per-type estimates from /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"estimated_cost_ms": {}}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("gatekeeper_type_estimated_cost_seconds"):
            t = name.split('type="', 1)[1].rstrip('"}')
            out["estimated_cost_ms"][t] = float(value) * 1e3
        elif name in ("gatekeeper_capacity_seconds", "gatekeeper_admitted_total") or name.startswith(
            "gatekeeper_rejected_total"
        ):
            out[name] = float(value)
    return out


def prom(port: int, timeout_s: float = 2) -> dict[str, float]:
    """Every sample line of a Prometheus text page: `name{labels}` -> value."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def scrape_upstream_work(port: int) -> dict:
    """The synthetic upstream's work counters (whole run, warm-up included): work served on
    completed requests and work wasted on requests whose caller left mid-service (a client
    timeout closing the connection, through the proxy or directly)."""
    v = prom(port, timeout_s=5)
    done_s = v['synthetic_work_seconds_total{outcome="completed"}']
    wasted_s = v['synthetic_work_seconds_total{outcome="abandoned"}']
    return {
        "completed": int(v['synthetic_requests_total{outcome="completed"}']),
        "abandoned": int(v['synthetic_requests_total{outcome="abandoned"}']),
        "completed_work_s": done_s,
        "abandoned_work_s": wasted_s,
        "wasted_fraction": wasted_s / (done_s + wasted_s) if done_s + wasted_s > 0 else None,
        # Processor-seconds the model was busy, and the part of it spent on completed
        # requests past their cost (held until the model's next event).
        "busy_cpu_s": v.get("synthetic_busy_cpu_seconds_total"),
        "overrun_s": v.get("synthetic_overrun_seconds_total"),
    }


def steal_s() -> float:
    """Seconds of steal summed over all CPUs so far (/proc/stat, USER_HZ ticks)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def by_type(m: dict[str, float], metric: str) -> dict[str, float]:
    pre = metric + '{type="GET /t/'
    return {k[len(pre) : -2]: v for k, v in m.items() if k.startswith(pre)}


#: Shortest --sample-ms accepted (see main).
MIN_SAMPLE_MS = 10


class Sampler:
    """Samples, every `period_s` during a run, the gatekeeper's admission state (load,
    capacity, queue, in flight, the head's charge, per type: queued, in flight, estimate)
    and the synthetic upstream's (requests in the model, busy processors, completed work,
    overrun), plus the host's steal, for --sample-ms. Diagnosis of where capacity goes:
    the timeline says, moment by moment, whether the backend had idle processors and what
    the gate was doing then."""

    def __init__(self, up_port: int, admin_port: int | None, period_s: float):
        self.up_port, self.admin_port, self.period_s = up_port, admin_port, period_s
        self.rows: list[dict] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.t0 = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic() - self.t0
            row: dict = {"t_s": t, "steal_s": steal_s()}
            with contextlib.suppress(OSError):
                u = prom(self.up_port)
                # .get: an older binary (--bin of a baseline) lacks the newer gauges.
                row["up"] = {
                    "in_model": u.get("synthetic_in_model", float("nan")),
                    "busy_cpu_s": u.get("synthetic_busy_cpu_seconds_total", float("nan")),
                    "completed_work_s": u['synthetic_work_seconds_total{outcome="completed"}'],
                    "overrun_s": u.get("synthetic_overrun_seconds_total", float("nan")),
                }
            if self.admin_port is not None:
                with contextlib.suppress(OSError):
                    g = prom(self.admin_port)
                    row["gate"] = {
                        "load_s": g["gatekeeper_load_seconds"],
                        "capacity_s": g["gatekeeper_capacity_seconds"],
                        "queue": g["gatekeeper_queue_length"],
                        "in_flight": g["gatekeeper_in_flight"],
                        "head_cost_s": g.get("gatekeeper_queue_head_cost_seconds", float("nan")),
                        "queued": {k: v for k, v in by_type(g, "gatekeeper_type_queued").items() if v},
                        "in_flight_by_type": {
                            k: v for k, v in by_type(g, "gatekeeper_type_in_flight").items() if v
                        },
                        "estimate_ms": {
                            k: 1e3 * v
                            for k, v in by_type(g, "gatekeeper_type_estimated_cost_seconds").items()
                        },
                        "rejected_queue_wait": g['gatekeeper_rejected_total{reason="queue_wait"}'],
                    }
            self.rows.append(row)
            self.stop.wait(max(0.0, self.period_s - (time.monotonic() - self.t0 - t)))


def timeline_summary(
    rows: list[dict], warmup_s: float, duration_s: float, cpus: int, max_in_flight: int
) -> dict:
    """What the samples in the measurement window say about unused backend capacity.

    Between consecutive samples: the backend's busy processors (busy-CPU counter delta over
    time) and its completed work rate. Per sample: `idle` when fewer than `cpus` requests
    were in the model. For the idle samples, what the gate was doing: nothing waiting
    (`queue_empty`), the head's charge not fitting in capacity - load (`head_blocked`),
    the in-flight cap reached (`in_flight_cap`), or a head that fits (`head_fits`: the gate
    would have admitted it at its next event, so the backend's idleness is momentary)."""
    w = [r for r in rows if warmup_s <= r["t_s"] <= duration_s and "up" in r]
    if len(w) < 2:
        return {}
    span = w[-1]["t_s"] - w[0]["t_s"]
    busy = (w[-1]["up"]["busy_cpu_s"] - w[0]["up"]["busy_cpu_s"]) / span
    work = (w[-1]["up"]["completed_work_s"] - w[0]["up"]["completed_work_s"]) / span
    overrun = (w[-1]["up"]["overrun_s"] - w[0]["up"]["overrun_s"]) / span
    steal = (w[-1]["steal_s"] - w[0]["steal_s"]) / span
    out = {
        "samples": len(w),
        "busy_cpus": busy,
        "completed_work_per_s": work,
        "overrun_per_s": overrun,
        "steal_cpus": steal,
        "mean_in_model": sum(r["up"]["in_model"] for r in w) / len(w),
        "idle_fraction": sum(r["up"]["in_model"] < cpus for r in w) / len(w),
    }
    gw = [r for r in w if "gate" in r]
    if gw:
        idle = [r for r in gw if r["up"]["in_model"] < cpus]
        why = {"queue_empty": 0, "in_flight_cap": 0, "head_blocked": 0, "head_fits": 0}
        for r in idle:
            g = r["gate"]
            if g["queue"] == 0:
                why["queue_empty"] += 1
            elif g["in_flight"] >= max_in_flight:
                why["in_flight_cap"] += 1
            elif g["load_s"] + g["head_cost_s"] > g["capacity_s"] + 1e-9:
                why["head_blocked"] += 1
            else:
                why["head_fits"] += 1

        def mean(v):
            return sum(v) / len(v) if v else None

        out.update(
            {
                "mean_load_over_capacity": mean([r["gate"]["load_s"] / r["gate"]["capacity_s"] for r in gw]),
                "mean_queue": mean([r["gate"]["queue"] for r in gw]),
                "mean_in_flight": mean([r["gate"]["in_flight"] for r in gw]),
                "idle_samples_by_gate_state": why,
                "idle_mean_load_over_capacity": mean(
                    [r["gate"]["load_s"] / r["gate"]["capacity_s"] for r in idle]
                ),
                "idle_mean_in_flight": mean([r["gate"]["in_flight"] for r in idle]),
                "idle_mean_in_model": mean([r["up"]["in_model"] for r in idle]),
                "idle_mean_head_cost_ms": mean([1e3 * r["gate"]["head_cost_s"] for r in idle]),
                "rejected_queue_wait_in_window": gw[-1]["gate"]["rejected_queue_wait"]
                - gw[0]["gate"]["rejected_queue_wait"],
            }
        )
    return out


def max_queue_wait_rule(a: argparse.Namespace) -> tuple[float, str]:
    """The gatekeeper's --max-queue-wait for every gatekeeper point, from the bench's
    parameters only (decided in session 5 before any run with it; not tuned on outcomes).

    An admitted request must be able to finish before its client gives up, or the backend
    serves it for nobody. The longest an admitted request can take is the costliest type's
    cost when the most requests the proxy lets in share the backend's processors:
    cost x max(1, in_flight / cpus) (processor sharing, no thrashing up to C). The queue wait
    is bounded so that twice that still fits in the client timeout:
    max_queue_wait = timeout - 2 x worst service time. The factor 2 covers what the bound
    leaves out (the model's 1 ms timers, the generator's and proxy's own latency, an
    abandoned request lingering in the backend until its next event).
    """
    costliest_ms = max(type_cost_ms(f"/t/{name}", a.scale) for name in TABLE1_MS)
    in_flight = a.max_in_flight or a.slots
    worst_ms = costliest_ms * max(1.0, in_flight / a.cpus)
    wait_s = a.timeout - 2 * worst_ms / 1e3
    text = (
        f"max_queue_wait = client timeout - 2 x the costliest type's worst service time = "
        f"{a.timeout:g} s - 2 x ({costliest_ms:g} ms x max(1, {in_flight} in flight / {a.cpus} cpus)) "
        f"= {wait_s:g} s, 503 + Retry-After beyond; every gatekeeper configuration, both models. "
        "Rule fixed before any run with it (session 5): " + " ".join(max_queue_wait_rule.__doc__.split())
    )
    return wait_s, text


#: `shortfirst gatekeeper calibrate` does not end its climb before the capacity holds this
#: many requests of the costliest type (calibrate.rs, LARGEST_REQUESTS_BEFORE_STOP).
CALIBRATE_FLOOR_REQUESTS = 4


def max_charge_share_spec(spec: str) -> tuple[float | None, str]:
    """The gatekeeper's --max-charge-share for every gatekeeper point: `rule`, `none` (the
    paper's unbounded charges) or a fraction in (0, 1].

    The rule: 1 / CALIBRATE_FLOOR_REQUESTS. The calibration's capacity holds at least that
    many of the costliest requests by the estimates it saw, so at estimates like those no
    charge is capped; the bound only caps estimates inflated far beyond them. Measured
    (session 6, closed model at twice the saturating load, --sample-ms timelines): every
    run starts with all users arriving at once on cold charges, the gate admits up to
    --max-in-flight (32) requests, Best Sellers' first samples are taken 32-way shared on 4
    processors and its estimate starts at 1.6-1.8 s (0.30 s true cost); with two of those
    above capacity / 2 the backend then ran one Best Sellers at a time (1-3 requests in the
    model, 4 processors) for 2-4 s until the estimate decayed, past the 5 s warm-up into the
    measurement window in 3 of 6 runs (fifo and sjf, 3 runs each). With the bound the head
    always finds room once the load is at most 3/4 of the capacity, so at least 4 requests
    run while any waits (core::admission, "Bounded charges", property-tested). Chosen after
    those measurements, so it is not the bench's default: with the synthetic model's exact
    intervals and fifo's re-pricing of queued requests, unbounded charges (`none`, the
    configuration fixed before any run) measured 3.96-4.01 work/s at 2x in every mode
    (session 6), the same as the rule."""
    if spec == "rule":
        share = 1 / CALIBRATE_FLOOR_REQUESTS
        return share, (
            f"max_charge_share = 1 / {CALIBRATE_FLOOR_REQUESTS} (the calibration's floor of the "
            "costliest requests the capacity holds) = "
            f"{share:g}: " + " ".join(max_charge_share_spec.__doc__.split("The rule:", 1)[1].split())
        )
    if spec == "none":
        return None, "no max_charge_share: the paper's unbounded charges"
    try:
        v = float(spec)
    except ValueError:
        raise ValueError(f"max charge share {spec!r}: expected rule, none or a fraction") from None
    if not 0 < v <= 1:
        raise ValueError(f"max charge share {v:g}: must be in (0, 1]")
    return v, f"max_charge_share = {v:g} (given on the command line)"


def max_queue_wait_spec(spec: str, a: argparse.Namespace) -> tuple[float | None, str]:
    """`rule` (max_queue_wait_rule), `none` (no limit: the paper's no-drop default) or seconds."""
    if spec == "rule":
        return max_queue_wait_rule(a)
    if spec == "none":
        return None, "no max_queue_wait: requests wait until admitted or until their client leaves"
    try:
        v = float(spec)
    except ValueError:
        raise ValueError(f"max queue wait {spec!r}: expected rule, none or seconds") from None
    return v, f"max_queue_wait = {v:g} s (given on the command line)"


class Bench:
    def __init__(self, a: argparse.Namespace, work: Path):
        self.a = a
        self.work = work
        self.bin = str(Path(a.bin).resolve())
        self.counter = 0
        #: The --compare-max-queue-wait runs, if any (filled by run_models).
        self.comparison: dict | None = None

    def upstream(self) -> tuple[Proc, int]:
        port = free_port()
        a = self.a
        self.counter += 1
        p = Proc(
            [
                self.bin,
                "gatekeeper",
                "synthetic-upstream",
                "--listen",
                f"127.0.0.1:{port}",
                "--scale",
                str(a.scale),
                "--cpus",
                str(a.cpus),
                "--slots",
                str(a.slots),
                "--thrash",
                str(a.thrash),
                "--write-mix",
                str(self.work / "mix.csv"),
            ],
            self.work / f"upstream-{self.counter}.log",
        )
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
    ) -> tuple[Proc, int, int]:
        port, admin = free_port(), free_port()
        self.counter += 1
        p = Proc(
            [
                str(Path(binary).resolve()) if binary else self.bin,
                "gatekeeper",
                "--listen",
                f"127.0.0.1:{port}",
                "--upstream",
                f"http://127.0.0.1:{up_port}",
                "--capacity",
                capacity,
                "--policy",
                policy,
                "--admin",
                f"127.0.0.1:{admin}",
                *self.in_flight_args(),
                *self.wait_args(max_queue_wait_s),
                *(
                    []
                    if self.a.max_charge_share_f is None
                    else ["--max-charge-share", f"{self.a.max_charge_share_f:g}"]
                ),
                *(extra or []),
                *self.a.gatekeeper_args.split(),
            ],
            self.work / f"proxy-{self.counter}.log",
        )
        wait_port(port)
        return p, port, admin

    @staticmethod
    def wait_args(max_queue_wait_s: float | None) -> list[str]:
        return [] if max_queue_wait_s is None else ["--max-queue-wait", f"{1e3 * max_queue_wait_s:.0f}ms"]

    def in_flight_args(self) -> list[str]:
        return ["--max-in-flight", str(self.a.max_in_flight)] if self.a.max_in_flight else []

    def load(
        self, port: int, model: str, trace: Path, tag: str, duration_s: float, extra: list[str] | None = None
    ) -> tuple[Path, float]:
        out = self.work / tag
        argv = [
            self.bin,
            "load",
            "--target",
            f"http://127.0.0.1:{port}",
            "--trace",
            str(trace),
            "--out",
            str(out),
            "--model",
            model,
            "--duration",
            f"{duration_s}",
            "--timeout",
            str(self.a.timeout),
            "--seed",
            str(self.a.seed),
            "--quiet",
            *(extra or []),
        ]
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


ACCOUNTING_NOTE = (
    "Two accountings of the same runs. Full: every request scheduled in the window counts, "
    "a timed-out one at the client timeout ({timeout} s), an error at the time it took. Paper "
    "(Elnikety et al. 2004, section 4): only successful requests count, in throughput and in "
    "response time; requests the client gave up on after {timeout} s are excluded. The "
    "timeout is the user's patience, fixed before the runs (the bench's default since it was "
    "written): TPC-W bounds the 90th percentile of each interaction's response time at 3 to "
    "20 s, and the paper does not state its clients' timeout. In a saturated closed loop "
    "Little's law N = X (R + Z) ties the full mean response time to throughput (checked per "
    "point in littles_law), so a policy can only lower it much by raising throughput; the "
    "paper's accounting drops the longest waits, which under sjf are the costly requests."
)

NGINX_CONF = """worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}
}}
"""


def latencies_us(run_dir: Path) -> list[float]:
    """Per-request latency, send start to last byte (generator lateness excluded), of the
    completed requests, without the first 10% (connection set-up, cold caches)."""
    with open(run_dir / "requests.csv") as f:
        v = [
            1e6 * (float(r["done_s"]) - float(r["start_s"]))
            for r in csv.DictReader(f)
            if r["outcome"] == "ok" and r["status"] == "200"
        ]
    return v[len(v) // 10 :]


#: Decided before the first run of these alternating rounds (session 4, 01:06 UTC) and not
#: changed after looking at any outcome.
OVERHEAD_PASS_RULE = (
    "pass if the median over rounds of the per-round overhead (the gatekeeper's mean latency "
    "minus direct's mean latency in the same round) is <= 200 us. A median of round means "
    "keeps every request's latency inside its round's mean (tails count) while one round hit "
    "by a host stall cannot decide the verdict alone. The pooled mean and median over all "
    "rounds are reported next to it and are not used for the verdict."
)


@contextlib.contextmanager
def halt_poll_ns(value: int | None):
    """benchlib.halt_poll_ns, only under the shared bench lock: the setting is
    machine-global, so no other benchmark may run while it is changed."""
    if value is not None and not bench_lock_held_by_ancestor():
        raise RuntimeError(
            f"--halt-poll-ns changes {HALT_POLL}, machine-global: run the bench under "
            f"`flock {BENCH_LOCK} ...` so no other benchmark sees the change"
        )
    with benchlib.halt_poll_ns(value) as before:
        yield before


def cpu_s(pid: int) -> float:
    """CPU time (s) of a process, its threads and its child processes so far (schedstat:
    nanoseconds on a CPU, per thread; an nginx master's worker is its child)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        base = Path(f"/proc/{p}/task")
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for t in base.iterdir():
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    total += int((t / "schedstat").read_text().split()[0]) / 1e9
                    todo += [int(c) for c in (t / "children").read_text().split()]
    return total


def request_count(run_dir: Path) -> int:
    """Requests the generator recorded (any outcome)."""
    with open(run_dir / "requests.csv") as f:
        return sum(1 for _ in f) - 1


def percentile(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


def overhead_rounds(b: Bench, ports: dict[str, int], trace: Path, tag: str, pids: dict[str, int]) -> dict:
    """Alternating rounds over `ports`; the order rotates every round so no path always
    runs first (after an idle gap) or last. `pids`: the proxy process of each proxied path,
    whose CPU time over all rounds is divided by the requests it served."""
    import statistics

    a = b.a
    names = list(ports)
    rounds: dict[str, list[dict]] = {k: [] for k in names}
    pooled: dict[str, list[float]] = {k: [] for k in names}
    sent = dict.fromkeys(names, 0)
    cpu_before = {k: cpu_s(pid) for k, pid in pids.items()}
    for i in range(a.overhead_rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            out, _wall = b.load(
                ports[name],
                "open",
                trace,
                f"overhead{tag}-{name}-{i}",
                a.overhead_duration,
                ["--persistent", "1000"],
            )
            v = latencies_us(out)
            sent[name] += request_count(out)
            if not v:
                raise RuntimeError(f"overhead round {i} {name}: no completed requests")
            pooled[name] += v
            rounds[name].append(
                {
                    "round": i,
                    "position": order.index(name),
                    "n": len(v),
                    "mean_us": statistics.fmean(v),
                    "median_us": statistics.median(v),
                    "p99_us": percentile(v, 0.99),
                }
            )
    cpu = {}
    for k, pid in pids.items():
        used = cpu_s(pid) - cpu_before[k]
        cpu[k] = {"cpu_s": used, "requests": sent[k], "cpu_us_per_request": 1e6 * used / max(sent[k], 1)}
    for k, c in cpu.items():
        print(
            f"  overhead{tag} {k:<20} CPU {c['cpu_s']:.3f} s for {c['requests']} requests: "
            f"{c['cpu_us_per_request']:.1f} us/request",
            file=sys.stderr,
            flush=True,
        )
    latency = {
        k: {
            "n": len(v),
            "mean_us": statistics.fmean(v),
            "median_us": statistics.median(v),
            "p90_us": percentile(v, 0.90),
            "p99_us": percentile(v, 0.99),
        }
        for k, v in pooled.items()
    }
    overhead = {}
    for k in names:
        if k == "direct":
            continue
        per_round_mean = [
            r["mean_us"] - d["mean_us"] for r, d in zip(rounds[k], rounds["direct"], strict=True)
        ]
        per_round_median = [
            r["median_us"] - d["median_us"] for r, d in zip(rounds[k], rounds["direct"], strict=True)
        ]
        overhead[k] = {
            "median_of_round_means": statistics.median(per_round_mean),
            "pooled_mean": latency[k]["mean_us"] - latency["direct"]["mean_us"],
            "pooled_median": latency[k]["median_us"] - latency["direct"]["median_us"],
            "median_of_round_medians": statistics.median(per_round_median),
            "per_round_mean": per_round_mean,
            "per_round_median": per_round_median,
            "pass": statistics.median(per_round_mean) <= 200,
        }
        o = overhead[k]
        print(
            f"  overhead{tag} {k:<20} median of round means {o['median_of_round_means']:6.0f} us  "
            f"pooled mean {o['pooled_mean']:6.0f} us  pooled median {o['pooled_median']:6.0f} us  "
            f"per round {' '.join(f'{x:.0f}' for x in per_round_mean)}",
            file=sys.stderr,
            flush=True,
        )
    return {"latency": latency, "per_round": rounds, "overhead_us": overhead, "proxy_cpu": cpu}


def measure_overhead(b: Bench, capacity: str) -> dict:
    """Proxy overhead at low load, the same run: the upstream's /ping (no backend work)
    at --overhead-rate requests/s (open model, kept-alive connections), directly, through
    the gatekeeper (fifo), through the gatekeeper with --busy-poll-us N
    (--overhead-busy-poll-us) and, as a reference, through nginx (one worker, kept-alive
    upstream connections); optionally through a second gatekeeper binary
    (--overhead-baseline-bin, e.g. the previous commit's). CPU per request of each proxy:
    its CPU time over the rounds (schedstat of its threads and child processes) divided by
    the requests sent through it; between rounds an idle proxy uses no CPU (busy polling
    stops N us after the last event), so this is the CPU its requests cost. Many short rounds alternate
    between the paths, the order rotating every round, so that a noisy neighbour or a host
    stall hits all of them alike. Latency: send start to last byte of each completed
    request (generator lateness excluded), without the first 10% of each round. Overhead
    of a path = its latency minus direct's: per round (mean and median), the median over
    rounds of the per-round means, and pooled over all rounds (mean and median).
    With --halt-poll-ns N every round set runs twice, with the machine's setting and with
    the guest halt-polling set to N, reported side by side."""
    import shutil

    a = b.a
    trace = b.work / "overhead.csv"
    write_trace(trace, [("/ping", 1.0)], a.overhead_rate, a.overhead_duration, a.seed)
    up, up_port = b.upstream()
    with contextlib.ExitStack() as stack:
        stack.enter_context(up)
        ports = {"direct": up_port}
        pids = {}
        px, port, _admin = b.proxy(up_port, "fifo", capacity, max_queue_wait_s=a.max_queue_wait_s)
        stack.enter_context(px)
        ports["gatekeeper"] = port
        pids["gatekeeper"] = px.p.pid
        if a.overhead_busy_poll_us:
            bp, bpport, _ = b.proxy(
                up_port,
                "fifo",
                capacity,
                max_queue_wait_s=a.max_queue_wait_s,
                extra=["--busy-poll-us", str(a.overhead_busy_poll_us)],
            )
            stack.enter_context(bp)
            ports["gatekeeper-busy-poll"] = bpport
            pids["gatekeeper-busy-poll"] = bp.p.pid
        if a.overhead_baseline_bin:
            bpx, bport, _ = b.proxy(
                up_port, "fifo", capacity, binary=a.overhead_baseline_bin, max_queue_wait_s=a.max_queue_wait_s
            )
            stack.enter_context(bpx)
            ports["gatekeeper-baseline"] = bport
            pids["gatekeeper-baseline"] = bpx.p.pid
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        if a.overhead_nginx == "yes" and not nginx:
            raise RuntimeError("--overhead-nginx yes: nginx not found")
        if nginx and a.overhead_nginx != "no":
            d = b.work / "nginx"
            d.mkdir()
            nport = free_port()
            (d / "nginx.conf").write_text(NGINX_CONF.format(dir=d, up=up_port, port=nport))
            ng = Proc([nginx, "-p", str(d), "-c", str(d / "nginx.conf")], b.work / "nginx.log")
            stack.enter_context(ng)
            wait_port(nport)
            ports["nginx"] = nport
            pids["nginx"] = ng.p.pid
        settings = {}
        machine_value = read_halt_poll()
        r = overhead_rounds(b, ports, trace, "", pids)
        settings["machine"] = {"guest_halt_poll_ns": machine_value, **r}
        if a.halt_poll_ns is not None:
            with halt_poll_ns(a.halt_poll_ns):
                r = overhead_rounds(b, ports, trace, f"-hp{a.halt_poll_ns}", pids)
            settings[f"halt_poll_{a.halt_poll_ns}"] = {"guest_halt_poll_ns": a.halt_poll_ns, **r}
    return {
        "rate_per_s": a.overhead_rate,
        "rounds": a.overhead_rounds,
        "round_s": a.overhead_duration,
        "paths": list(ports),
        "baseline_bin": a.overhead_baseline_bin,
        # The verdict's figures: the machine's own halt-polling setting, as our binary must
        # not depend on it.
        "busy_poll_us": a.overhead_busy_poll_us or None,
        **{k: settings["machine"][k] for k in ("latency", "per_round", "overhead_us", "proxy_cpu")},
        "by_halt_poll_setting": settings,
        "pass_rule": OVERHEAD_PASS_RULE,
        "method": measure_overhead.__doc__,
    }


#: The fixed capacity of --only-overhead runs (no calibration): /ping costs well under a
#: millisecond and at most a few are in flight at the overhead rate, so any capacity above a
#: few milliseconds admits every request at once, as the calibrated one does.
ONLY_OVERHEAD_CAPACITY = "1000ms"


def run_models(b: Bench, work: Path) -> tuple[str, dict | None, dict]:
    """Calibration (unless --capacity is given), then the closed and open runs."""
    a = b.a
    up, up_port = b.upstream()
    with up:
        mix = read_mix(work / "mix.csv")
        total_w = sum(w for _, w in mix)
        mean_cost_ms = sum(w * type_cost_ms(p, a.scale) for p, w in mix) / total_w
        calibration = None
        if a.capacity == "calibrate":
            cal_out = work / "calibration.json"
            r = subprocess.run(
                [
                    b.bin,
                    "gatekeeper",
                    "calibrate",
                    "--upstream",
                    f"http://127.0.0.1:{up_port}",
                    "--mix",
                    str(work / "mix.csv"),
                    "--clients",
                    str(2 * a.slots),
                    "--warmup",
                    "2s",
                    "--measure",
                    "5s",
                    "--min",
                    f"{a.scale * 20}ms",
                    "--max",
                    f"{a.scale * 20000}ms",
                    "--refine-steps",
                    "2",
                    "--max-trials",
                    "16",
                    "--out",
                    str(cal_out),
                    *b.in_flight_args(),
                ],
                check=False,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if r.returncode != 0:
                raise RuntimeError(f"calibrate failed:\n{r.stderr[-3000:]}")
            calibration = json.loads(cal_out.read_text())
            capacity = f"{calibration['best_capacity_us'] / 1e3:.3f}ms"
        else:
            capacity = a.capacity
    print(f"capacity: {capacity}", file=sys.stderr, flush=True)

    # Offered loads relative to the peak throughput: measured by calibration, or the
    # model's analytic peak (slots / mean cost) without it.
    if calibration is not None:
        peak_est = max(t["throughput_per_s"] for t in calibration["trials"])
    else:
        peak_est = a.cpus / (mean_cost_ms / 1e3)
    results = {"closed": {}, "open": {}}
    # Closed model: N users with think time Z keep the backend at its peak when
    # N = peak x (Z + response time); at saturation the response time is small next to Z.
    closed_users = {}
    for f in factors(a.closed_factors):
        users = max(1, round(f * peak_est * a.think_s))
        closed_users[f] = users
    open_rates = {f: f * peak_est for f in factors(a.open_factors)}
    # Every gatekeeper point runs with the main --max-queue-wait; with
    # --compare-max-queue-wait it runs again right after with the other setting, reported
    # under "max_queue_wait_comparison" (not used for the targets).
    wait_s = a.max_queue_wait_s
    other = a.compare_max_queue_wait_s
    compare = {"closed": {}, "open": {}} if a.compare_max_queue_wait else None

    def point(config: str, model_name: str, model: str, trace: Path, tag: str) -> dict:
        s = b.one_run(config, capacity, model, trace, tag, wait_s)
        if compare is not None and config != "direct":
            c = b.one_run(config, capacity, model, trace, f"{tag}-wait-{a.compare_max_queue_wait}", other)
            compare[model_name].setdefault(config, []).append(c)
        return s

    closed_trace = work / "closed-trace.csv"
    write_trace(closed_trace, mix, 1000.0, a.duration * 4, a.seed)
    for config in [c for c in a.configs.split(",") if c]:
        results["closed"][config] = []
        for f, users in closed_users.items():
            model = f"closed:{users},think=exp:{a.think_s}"
            s = point(config, "closed", model, closed_trace, f"closed-{config}-{users}")
            runs = [s, *([compare["closed"][config][-1]] if compare and config in compare["closed"] else [])]
            for r in runs:
                r.update({"users": users, "load_factor": f})
                ll = r["littles_law"]
                ll["users"] = users
                ll["ratio"] = ll["n_from_logs"] / users
            results["closed"][config].append(s)
    for config in [c for c in a.open_configs.split(",") if c]:
        results["open"][config] = []
        for f, rate in open_rates.items():
            trace = work / f"open-{f}.csv"
            write_trace(trace, mix, rate, a.duration, a.seed)
            s = point(config, "open", "open", trace, f"open-{config}-{rate:.0f}")
            runs = [s, *([compare["open"][config][-1]] if compare and config in compare["open"] else [])]
            for r in runs:
                r.update({"rate_per_s": rate, "load_factor": f})
                r.pop("littles_law")  # no fixed population in an open model
            results["open"][config].append(s)
    if compare is not None:
        b.comparison = {
            "max_queue_wait_s": other,
            "method": a.compare_max_queue_wait_method,
            **compare,
        }
    return capacity, calibration, results


def factors(spec: str) -> list[float]:
    """`--closed-factors` / `--open-factors`: comma-separated multiples; empty = none."""
    return [float(x) for x in spec.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/shortfirst")
    ap.add_argument("--out", default=None, help="default results/bench-gatekeeper-synthetic.json")
    ap.add_argument("--scale", type=float, default=0.25, help="cost scale factor (1 = 1 ms .. 2 s)")
    ap.add_argument("--cpus", type=int, default=4, help="backend processors (full speed up to this)")
    ap.add_argument("--slots", type=int, default=32, help="C: the backend thrashes beyond this")
    ap.add_argument("--thrash", type=float, default=0.1)
    ap.add_argument("--think-s", type=float, default=0.5, help="closed model: mean think time")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds dropped at the start of each run")
    ap.add_argument("--closed-factors", default="0.5,1,2,3", help="users as multiples of saturation")
    ap.add_argument("--open-factors", default="0.5,1,2", help="arrival rates as multiples of peak")
    ap.add_argument("--capacity", default="calibrate", help="'calibrate', 'auto' or a cost like 80ms")
    ap.add_argument(
        "--timeout",
        type=float,
        default=15.0,
        help="client timeout (s): the user gives up (see ACCOUNTING_NOTE); fixed before any run",
    )
    ap.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="gatekeeper --max-in-flight (default: C, the thrash threshold; 0 = none)",
    )
    ap.add_argument(
        "--max-queue-wait",
        default="rule",
        help="gatekeeper --max-queue-wait for every gatekeeper point: 'rule' (default: client "
        "timeout - 2 x the costliest type's worst service time, see max_queue_wait_rule), 'none' "
        "(the paper's no-drop default) or seconds",
    )
    ap.add_argument(
        "--max-charge-share",
        default="none",
        help="gatekeeper --max-charge-share for every gatekeeper point: 'none' (default: the "
        "paper's unbounded charges), 'rule' (1/4, the calibration's floor, see "
        "max_charge_share_spec) or a fraction in (0, 1]",
    )
    ap.add_argument(
        "--compare-max-queue-wait",
        default=None,
        metavar="SPEC",
        help="run every gatekeeper point a second time, right after, with this max queue wait "
        "(same forms as --max-queue-wait, e.g. none); reported side by side under "
        "max_queue_wait_comparison, not used for the targets",
    )
    ap.add_argument(
        "--gatekeeper-args",
        default="",
        help="extra flags for every gatekeeper started (e.g. '--charge-at arrival' for a comparison)",
    )
    ap.add_argument(
        "--sample-ms",
        type=float,
        default=0,
        help="sample the gatekeeper's and the upstream's /metrics (and the host's steal) every "
        "this many ms during each run: a timeline per point and its summary (where backend "
        "capacity went unused); 0 = off (the default: the sampler takes CPU from the run)",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--configs",
        default=",".join(["direct", *POLICIES]),
        help="comma-separated subset of direct," + ",".join(POLICIES) + " (closed model)",
    )
    ap.add_argument("--open-configs", default="direct,fifo,sjf", help="configurations run in the open model")
    ap.add_argument("--no-overhead", action="store_true", help="skip the low-load proxy overhead runs")
    ap.add_argument(
        "--only-overhead",
        action="store_true",
        help="run only the overhead rounds (a few minutes): no calibration, no closed/open runs; the "
        "JSON has the same schema with those sections absent (default --out "
        "results/bench-gatekeeper-overhead.json)",
    )
    ap.add_argument("--overhead-rate", type=float, default=200.0, help="overhead runs: requests/s to /ping")
    ap.add_argument("--overhead-rounds", type=int, default=15, help="overhead runs: alternating rounds")
    ap.add_argument("--overhead-duration", type=float, default=3.0, help="overhead runs: seconds per round")
    ap.add_argument(
        "--overhead-baseline-bin",
        default=None,
        help="overhead runs: also measure this shortfirst binary's gatekeeper in the same rounds "
        "(before/after comparisons)",
    )
    ap.add_argument(
        "--halt-poll-ns",
        type=int,
        default=None,
        help="overhead runs: run the rounds a second time with the guest's cpuidle halt-polling "
        f"({HALT_POLL}, machine-global) set to this, restored afterwards, both reported side by "
        "side; needs root and the bench lock held (flock /run/shortfirst-bench.lock ...)",
    )
    ap.add_argument(
        "--overhead-busy-poll-us",
        type=int,
        default=500,
        help="overhead runs: also measure the gatekeeper with --busy-poll-us N in the same rounds "
        "(path gatekeeper-busy-poll; 0 = skip)",
    )
    ap.add_argument(
        "--overhead-nginx",
        choices=["auto", "yes", "no"],
        default="auto",
        help="also measure nginx as a reverse proxy in the same rounds (auto: if nginx is installed)",
    )
    a = ap.parse_args()
    # Terminating the bench unwinds the `with` blocks, which stop the child processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    known = {"direct", *POLICIES}
    for c in [*a.configs.split(","), *a.open_configs.split(",")]:
        if c and c not in known:
            ap.error(f"unknown configuration {c!r}: expected one of {sorted(known)}")
    # A timeline holds duration / period rows per point; a scrape of both /metrics takes a
    # few ms, so shorter periods only measure the sampler.
    if a.sample_ms and a.sample_ms < MIN_SAMPLE_MS:
        ap.error(f"--sample-ms {a.sample_ms:g}: must be 0 (off) or at least {MIN_SAMPLE_MS} ms")
    if a.max_in_flight is None:
        a.max_in_flight = a.slots
    a.compare_max_queue_wait_s = a.compare_max_queue_wait_method = None
    try:
        a.max_queue_wait_s, a.max_queue_wait_method = max_queue_wait_spec(a.max_queue_wait, a)
        if a.compare_max_queue_wait is not None:
            a.compare_max_queue_wait_s, a.compare_max_queue_wait_method = max_queue_wait_spec(
                a.compare_max_queue_wait, a
            )
        a.max_charge_share_f, a.max_charge_share_method = max_charge_share_spec(a.max_charge_share)
    except ValueError as e:
        ap.error(str(e))
    for w in (a.max_queue_wait_s, a.compare_max_queue_wait_s):
        if w is not None and w <= 0:
            ap.error(f"max queue wait {w:g} s: must be positive (client --timeout too short for the rule?)")
    if a.only_overhead and a.no_overhead:
        ap.error("--only-overhead and --no-overhead exclude each other")
    if a.out is None:
        a.out = f"results/bench-gatekeeper-{'overhead' if a.only_overhead else 'synthetic'}.json"
    if a.overhead_rounds < 1 or a.overhead_duration <= 0:
        ap.error("--overhead-rounds must be >= 1 and --overhead-duration > 0")
    if a.halt_poll_ns is not None and not HALT_POLL.exists():
        ap.error(f"--halt-poll-ns: {HALT_POLL} does not exist on this machine")

    t_start = time.monotonic()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gk-bench-") as tmp:
        work = Path(tmp)
        b = Bench(a, work)
        if a.only_overhead:
            capacity = ONLY_OVERHEAD_CAPACITY if a.capacity == "calibrate" else a.capacity
            calibration = results = None
        else:
            capacity, calibration, results = run_models(b, work)
        overhead = {} if a.no_overhead else measure_overhead(b, capacity)

    out = {
        "bench": "gatekeeper-synthetic",
        "command": " ".join(sys.argv),
        "parameters": vars(a),
        "note": (
            f"costs are the paper's Table 1 no-load costs clamped to [1 ms, 2 s] and multiplied by "
            f"scale={a.scale}; backend = {a.cpus} processor-sharing CPUs, thrashing beyond C={a.slots} "
            f"concurrent requests with factor {a.thrash}"
        ),
        "accounting_note": ACCOUNTING_NOTE.format(timeout=a.timeout),
        "method": {
            "max_queue_wait_s": a.max_queue_wait_s,
            "max_queue_wait": a.max_queue_wait_method,
            "max_charge_share": a.max_charge_share_f,
            "max_charge_share_rule": a.max_charge_share_method,
            "wasted_work": "upstream_work per point: the synthetic upstream's counters over the "
            "whole run (warm-up included) of work served on completed requests and of work "
            "served on requests abandoned mid-service (their client timed out), in seconds of "
            "base cost; wasted_fraction = abandoned / (completed + abandoned)",
        },
        "capacity": capacity,
        "calibration": calibration,
        "results": results,
        "max_queue_wait_comparison": b.comparison,
        "overhead": overhead,
        "sections": ["overhead"] if a.only_overhead else ["calibration", "results", "overhead"],
        "runtime_s": time.monotonic() - t_start,
        "git_commit": git_commit(),
        "machine": {**machine(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
    }
    if a.only_overhead:
        # Same schema, the sections not run are absent (not empty, which would read as "ran,
        # nothing to report").
        del out["calibration"], out["results"], out["max_queue_wait_comparison"]
        out["sections_note"] = (
            "--only-overhead: only the low-load overhead rounds ran; calibration and the "
            f"closed/open model runs are absent; the proxy ran with a fixed capacity {capacity}"
        )
    out["targets"] = evaluate(out)
    out["table"] = table(out)
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp, path)
    print(out["table"])
    print(json.dumps(out["targets"], indent=2))
    return 0


def evaluate(out: dict) -> dict:
    """The issue's targets, computed from the runs above (pass/fail plus the figures).

    Throughput is judged in both units: requests per second, and work per second (each
    completion weighted by its type's cost). Requests per second alone flatters a policy
    that completes many cheap requests while expensive ones wait past the window.
    Response times count timed-out requests at the timeout (see `summarize`).
    """
    t = {}
    res = out.get("results") or {}
    for model in ("closed", "open"):
        runs = res.get(model, {})
        if not runs:
            continue
        entry = {}
        for unit in ("throughput_per_s", "work_per_s"):
            peak = max(r[unit] for rs in runs.values() for r in rs)
            at2 = {
                c: next((r for r in rs if math.isclose(r["load_factor"], 2.0)), None)
                for c, rs in runs.items()
            }
            at2 = {c: r for c, r in at2.items() if r is not None}
            ratios = {c: r[unit] / peak for c, r in at2.items()}
            proxied = [v for c, v in ratios.items() if c != "direct"]
            entry[unit] = {
                "peak": peak,
                "ratio_at_2x": ratios,
                "pass": bool(proxied) and min(proxied) >= 0.95 and ratios.get("direct", 0.0) < 0.95,
            }
            if unit == "work_per_s":
                # The backend's own ceiling (every processor on useful work), for reading
                # the peak itself.
                entry[unit]["peak_over_backend_max"] = peak / out["parameters"]["cpus"]
        entry["wasted_work_fraction_at_2x"] = {
            c: (r.get("upstream_work") or {}).get("wasted_fraction") for c, r in at2.items()
        }
        cmp_runs = ((out.get("max_queue_wait_comparison") or {}).get(model)) or {}
        if cmp_runs:
            peak_work = entry["work_per_s"]["peak"]
            entry["max_queue_wait_comparison_at_2x"] = {
                "max_queue_wait_s": out["max_queue_wait_comparison"]["max_queue_wait_s"],
                "work_ratio_at_2x": {
                    c: r["work_per_s"] / peak_work
                    for c, rs in cmp_runs.items()
                    for r in rs
                    if math.isclose(r["load_factor"], 2.0)
                },
                "wasted_work_fraction_at_2x": {
                    c: (r.get("upstream_work") or {}).get("wasted_fraction")
                    for c, rs in cmp_runs.items()
                    for r in rs
                    if math.isclose(r["load_factor"], 2.0)
                },
                "note": "the same points run right after with the other max_queue_wait; ratios to "
                "the main runs' peak; not used for the verdict",
            }
        t[f"{model}_throughput_at_2x"] = entry
    for model in ("closed", "open"):
        runs = res.get(model, {})
        if "fifo" not in runs or "sjf" not in runs:
            continue
        top = max(r["load_factor"] for r in runs["fifo"])
        pick = {c: next((r for r in rs if r["load_factor"] == top), None) for c, rs in runs.items()}
        pick = {c: r for c, r in pick.items() if r is not None}
        fifo, sjf = pick["fifo"], pick["sjf"]
        rare = "admin_response"

        def type_ratio(name: str, sjf=sjf, fifo=fifo):
            a_, b_ = sjf["per_type"].get(name), fifo["per_type"].get(name)
            return None if not a_ or not b_ else a_["mean_response_ms"] / b_["mean_response_ms"]

        aging = {c: pick[c]["mean_response_ms"] for c in pick if c.startswith("sjf-aging")}
        ratio = fifo["mean_response_ms"] / sjf["mean_response_ms"]
        t[f"{model}_sjf_vs_fifo_at_highest_load"] = {
            "load_factor": top,
            "fifo_mean_ms": fifo["mean_response_ms"],
            "sjf_mean_ms": sjf["mean_response_ms"],
            "fifo_over_sjf": ratio,
            f"{COSTLIEST}_ms": {
                c: pick[c]["per_type"].get(COSTLIEST, {}).get("mean_response_ms") for c in pick
            },
            f"{COSTLIEST}_sjf_over_fifo": type_ratio(COSTLIEST),
            f"{rare}_sjf_over_fifo": type_ratio(rare),
            f"{rare}_samples": [
                sjf["per_type"].get(rare, {}).get("n", 0),
                fifo["per_type"].get(rare, {}).get("n", 0),
            ],
            "timeouts": {c: pick[c]["timeouts"] for c in pick},
            "paper_accounting": paper_accounting(pick, fifo, sjf),
            "aging_means_ms": aging,
            "pass_10x": ratio >= 10,
            "pass_costliest_within_20pct": (type_ratio(COSTLIEST) or 99) <= 1.2,
            "pass_aging_between": bool(aging)
            and all(sjf["mean_response_ms"] <= v <= fifo["mean_response_ms"] for v in aging.values()),
        }
    ov = out["overhead"]
    if ov:
        g = ov["overhead_us"]["gatekeeper"]
        t["proxy_overhead_low_load"] = {
            "rate_per_s": ov["rate_per_s"],
            "rule": ov["pass_rule"],
            "overhead_us_median_of_round_means": g["median_of_round_means"],
            "overhead_us_pooled_mean": g["pooled_mean"],
            "overhead_us_pooled_median": g["pooled_median"],
            "reference_overhead_us": {
                k: {x: v[x] for x in ("median_of_round_means", "pooled_mean", "pooled_median")}
                for k, v in ov["overhead_us"].items()
                if k != "gatekeeper"
            },
            "proxy_cpu_us_per_request": {k: v["cpu_us_per_request"] for k, v in ov["proxy_cpu"].items()},
            "busy_poll_us": ov.get("busy_poll_us"),
            "with_halt_poll": {
                k: v["overhead_us"]["gatekeeper"]["median_of_round_means"]
                for k, v in ov["by_halt_poll_setting"].items()
                if k != "machine"
            },
            "pass": g["pass"],
        }
    return t


def paper_accounting(pick: dict, fifo: dict, sjf: dict) -> dict:
    """The same targets counting successful requests only, as the paper does."""

    def ok_ms(r: dict, name: str | None = None) -> float | None:
        if name is None:
            return r["accounting"]["paper"]["mean_response_ms"]
        return r["per_type"].get(name, {}).get("mean_response_ms_successful")

    f, s = ok_ms(fifo), ok_ms(sjf)
    fc, sc = ok_ms(fifo, COSTLIEST), ok_ms(sjf, COSTLIEST)
    ratio = f / s if f and s else None
    costly = sc / fc if fc and sc else None
    return {
        "timeout_s": fifo["accounting"]["paper"]["timeout_s"],
        "fifo_mean_ms": f,
        "sjf_mean_ms": s,
        "fifo_over_sjf": ratio,
        f"{COSTLIEST}_sjf_over_fifo": costly,
        "excluded": {
            c: {k: pick[c]["accounting"]["paper"][k] for k in ("excluded_timeouts", "excluded_errors")}
            for c in pick
        },
        "pass_10x": ratio is not None and ratio >= 10,
        "pass_costliest_within_20pct": costly is not None and costly <= 1.2,
    }


def table(out: dict) -> str:
    """The runs as a plain-text table (also in the JSON), for reports."""
    lines = [
        f"{'model':<7}{'config':<20}{'load':>5}{'req/s':>8}{'work/s':>8}{'mean ms':>10}{'ok-only ms':>11}"
        f"{COSTLIEST + ' ms':>17}{'timeouts':>9}{'N/X(R+Z)':>9}"
    ]
    groups = [(m, c, rs) for m, runs in (out.get("results") or {}).items() for c, rs in runs.items()]
    cmp = out.get("max_queue_wait_comparison") or {}
    for m in ("closed", "open"):
        for c, rs in (cmp.get(m) or {}).items():
            w = cmp["max_queue_wait_s"]
            groups.append((m, f"{c}/w={'none' if w is None else f'{w:g}'}", rs))
    lines[0] += f"{'wasted':>8}"
    for model, config, rs in groups:
        for r in rs:
            c = r["per_type"].get(COSTLIEST, {}).get("mean_response_ms")
            ok = r["accounting"]["paper"]["mean_response_ms"]
            ll = r.get("littles_law", {}).get("ratio")
            lines.append(
                f"{model:<7}{config:<20}{r['load_factor']:>5g}{r['throughput_per_s']:>8.1f}"
                f"{r['work_per_s']:>8.2f}{(r['mean_response_ms'] or float('nan')):>10.1f}"
                f"{(ok or float('nan')):>11.1f}{(c or float('nan')):>17.1f}{r['timeouts']:>9}"
                + (f"{1 / ll:>9.3f}" if ll else f"{'-':>9}")
                + f"{100 * ((r.get('upstream_work') or {}).get('wasted_fraction') or 0):>7.1f}%"
            )
    ov = out.get("overhead")
    if ov:
        lines.append(
            f"overhead at {ov['rate_per_s']:g} req/s, {ov['rounds']} rounds of {ov['round_s']:g} s (us):"
        )
        for setting, r in ov["by_halt_poll_setting"].items():
            for k, o in r["overhead_us"].items():
                lines.append(
                    f"  {setting:<18}{k:<20} median of round means {o['median_of_round_means']:7.0f}  "
                    f"pooled mean {o['pooled_mean']:7.0f}  pooled median {o['pooled_median']:7.0f}"
                )
            for k, c in r.get("proxy_cpu", {}).items():
                lines.append(f"  {setting:<18}{k:<20} CPU per request {c['cpu_us_per_request']:7.1f} us")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
