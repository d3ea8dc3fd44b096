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

Writes one JSON file (temp file + rename).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from ....kit import HALT_POLL, git_commit, machine, shortfirst_binary, write_json
from ....spec.reader import read_spec
from ..timeline import MIN_SAMPLE_MS
from .models import run_models
from .overhead import ONLY_OVERHEAD_CAPACITY, measure_overhead
from .points import Bench
from .rules import ACCOUNTING_NOTE, max_charge_share_spec, max_queue_wait_spec
from .throughput import measure_throughput
from .verdict import evaluate, table

POLICIES = ["fifo", "sjf", "sjf-aging:1", "sjf-aging:2", "sjf-aging:5"]


def parser() -> argparse.ArgumentParser:
    """The bench's options, in groups: the backend, the runs, the gatekeeper and the
    overhead rounds."""
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench gatekeeper-synthetic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "experiment",
        nargs="?",
        default=None,
        help="experiment file (lab/experiments/gatekeeper-synthetic.toml): its settings, which the "
        "flags below override; without one, the flags' defaults",
    )
    for add in (_backend_options, _run_options, _gate_options, _overhead_options):
        add(ap)
    return ap


def parse(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the options: the experiment file's settings (read strictly, see
    `spec.synthetic`), then the command line's flags over them."""
    ap = parser()
    a = ap.parse_args(argv)
    if a.experiment is not None:
        ap.set_defaults(**read_spec(a.experiment, kind="gatekeeper", backend="synthetic").value)
        a = ap.parse_args(argv)
    return ap, a


def _backend_options(ap: argparse.ArgumentParser) -> None:
    """The binary, the output and the synthetic backend."""
    g = ap.add_argument_group("backend")
    g.add_argument("--bin", default=str(shortfirst_binary()))
    g.add_argument("--out", default=None, help="default results/bench-gatekeeper-synthetic.json")
    g.add_argument("--scale", type=float, default=0.25, help="cost scale factor (1 = 1 ms .. 2 s)")
    g.add_argument("--cpus", type=int, default=4, help="backend processors (full speed up to this)")
    g.add_argument("--slots", type=int, default=32, help="C: the backend thrashes beyond this")
    g.add_argument("--thrash", type=float, default=0.1)


def _run_options(ap: argparse.ArgumentParser) -> None:
    """Load models, durations, timeouts and sampling."""
    g = ap.add_argument_group("runs")
    g.add_argument("--think-s", type=float, default=0.5, help="closed model: mean think time")
    g.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    g.add_argument("--warmup", type=float, default=5.0, help="seconds dropped at the start of each run")
    g.add_argument("--closed-factors", default="0.5,1,2,3", help="users as multiples of saturation")
    g.add_argument("--open-factors", default="0.5,1,2", help="arrival rates as multiples of peak")
    g.add_argument(
        "--timeout",
        type=float,
        default=15.0,
        help="client timeout (s): the user gives up (see ACCOUNTING_NOTE); fixed before any run",
    )
    g.add_argument(
        "--sample-ms",
        type=float,
        default=0,
        help="sample the gatekeeper's and the upstream's /metrics (and the host's steal) every "
        "this many ms during each run: a timeline per point and its summary (where backend "
        "capacity went unused); 0 = off (the default: the sampler takes CPU from the run)",
    )
    g.add_argument("--seed", type=int, default=1)
    g.add_argument(
        "--configs",
        default=",".join(["direct", *POLICIES]),
        help="comma-separated subset of direct," + ",".join(POLICIES) + " (closed model)",
    )
    g.add_argument("--open-configs", default="direct,fifo,sjf", help="configurations run in the open model")


def _gate_options(ap: argparse.ArgumentParser) -> None:
    """The gatekeeper's settings at every point."""
    g = ap.add_argument_group("gatekeeper")
    g.add_argument("--capacity", default="calibrate", help="'calibrate', 'auto' or a cost like 80ms")
    g.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="gatekeeper --max-in-flight (default: C, the thrash threshold; 0 = none)",
    )
    g.add_argument(
        "--max-queue-wait",
        default="rule",
        help="gatekeeper --max-queue-wait for every gatekeeper point: 'rule' (default: client "
        "timeout - 2 x the costliest type's worst service time, see max_queue_wait_rule), 'none' "
        "(the paper's no-drop default) or seconds",
    )
    g.add_argument(
        "--max-charge-share",
        default="none",
        help="gatekeeper --max-charge-share for every gatekeeper point: 'none' (default: the "
        "paper's unbounded charges), 'rule' (1/4, the calibration's floor, see "
        "max_charge_share_spec) or a fraction in (0, 1]",
    )
    g.add_argument(
        "--compare-max-queue-wait",
        default=None,
        metavar="SPEC",
        help="run every gatekeeper point a second time, right after, with this max queue wait "
        "(same forms as --max-queue-wait, e.g. none); reported side by side under "
        "max_queue_wait_comparison, not used for the targets",
    )
    g.add_argument(
        "--gatekeeper-args",
        default="",
        help="extra flags for every gatekeeper started (e.g. '--charge-at arrival' for a comparison)",
    )


def _overhead_options(ap: argparse.ArgumentParser) -> None:
    """The low-load proxy overhead rounds."""
    g = ap.add_argument_group("overhead")
    g.add_argument("--no-overhead", action="store_true", help="skip the low-load proxy overhead runs")
    g.add_argument(
        "--only-overhead",
        action="store_true",
        help="run only the overhead rounds (a few minutes): no calibration, no closed/open runs; the "
        "JSON has the same schema with those sections absent (default --out "
        "results/bench-gatekeeper-overhead.json)",
    )
    g.add_argument("--overhead-rate", type=float, default=200.0, help="overhead runs: requests/s to /ping")
    g.add_argument("--overhead-rounds", type=int, default=15, help="overhead runs: alternating rounds")
    g.add_argument("--overhead-duration", type=float, default=3.0, help="overhead runs: seconds per round")
    g.add_argument(
        "--overhead-baseline-bin",
        default=None,
        help="overhead runs: also measure this shortfirst binary's gatekeeper in the same rounds "
        "(before/after comparisons)",
    )
    g.add_argument(
        "--halt-poll-ns",
        type=int,
        default=None,
        help="overhead runs: run the rounds a second time with the guest's cpuidle halt-polling "
        f"({HALT_POLL}, machine-global) set to this, restored afterwards, both reported side by "
        "side; needs root and the bench lock held (flock /run/shortfirst-bench.lock ...)",
    )
    g.add_argument(
        "--overhead-busy-poll-us",
        type=int,
        default=500,
        help="overhead runs: also measure the gatekeeper with --busy-poll-us N in the same rounds "
        "(path gatekeeper-busy-poll; 0 = skip)",
    )
    g.add_argument(
        "--throughput-rounds",
        type=int,
        default=5,
        help="after the overhead rounds, the proxy's cost at saturation: wrk on a 1 KB file of a "
        "`shortfirst serve` upstream, directly, through the gatekeeper and through nginx, in this "
        "many alternating rounds (0 = skip)",
    )
    g.add_argument("--throughput-duration", type=float, default=5.0, help="throughput rounds: seconds each")
    g.add_argument(
        "--throughput-connections", type=int, default=8, help="throughput rounds: wrk's connections"
    )
    g.add_argument("--throughput-threads", type=int, default=2, help="throughput rounds: wrk's threads")
    g.add_argument(
        "--overhead-nginx",
        choices=["auto", "yes", "no"],
        default="auto",
        help="also measure nginx as a reverse proxy in the same rounds (auto: if nginx is installed)",
    )


def check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Checks the options and derives the rules' values (`ap.error` on a bad one)."""
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
    if a.throughput_rounds < 0 or a.throughput_duration <= 0 or a.throughput_connections < 1:
        ap.error("--throughput-rounds must be >= 0, --throughput-duration > 0, --throughput-connections >= 1")
    if a.halt_poll_ns is not None and not HALT_POLL.exists():
        ap.error(f"--halt-poll-ns: {HALT_POLL} does not exist on this machine")


def result(
    a: argparse.Namespace,
    b: Bench,
    capacity: str,
    calibration,
    results,
    overhead,
    t_start: float,
    load_before,
) -> dict:
    """The result document: parameters, method, the runs, the machine and the commit."""
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
    return out


def main(argv: list[str] | None = None) -> int:
    ap, a = parse(argv)
    # Terminating the bench unwinds the `with` blocks, which stop the child processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    check(ap, a)
    t_start = time.monotonic()
    load_before = os.getloadavg()
    # The children's logs are removed after a run that ends well, kept after one that fails.
    work = Path(tempfile.mkdtemp(prefix="gk-bench-"))
    try:
        b = Bench(a, work)
        if a.only_overhead:
            capacity = ONLY_OVERHEAD_CAPACITY if a.capacity == "calibrate" else a.capacity
            calibration = results = None
        else:
            capacity, calibration, results = run_models(b, work)
        overhead = {} if a.no_overhead else measure_overhead(b, capacity)
        if overhead and a.throughput_rounds:
            overhead["throughput"] = measure_throughput(
                b, a.throughput_rounds, a.throughput_duration, a.throughput_connections, a.throughput_threads
            )
    except BaseException:
        print(f"the bench failed; the logs of its processes are kept in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)

    out = result(a, b, capacity, calibration, results, overhead, t_start, load_before)
    out["targets"] = evaluate(out)
    out["table"] = table(out)
    write_json(Path(a.out), out, allow_nan=True)
    print(out["table"])
    print(json.dumps(out["targets"], indent=2))
    return 0
