"""The proxy's overhead at low load: direct, through the gatekeeper (with and without busy
polling), through nginx and optionally an older binary, in alternating rounds.
"""

from __future__ import annotations

import contextlib
import csv
import shutil
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from .... import kit
from ....kit import (
    BENCH_LOCK,
    HALT_POLL,
    Child,
    bench_lock_held_by_ancestor,
    free_port,
    read_halt_poll,
    wait_port,
)
from .models import write_trace
from .points import Bench
from .rules import OVERHEAD_PASS_RULE

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


def nginx_binary() -> str | None:
    """nginx's path: on PATH, or Debian's /usr/sbin (not on a non-root PATH); None if absent."""
    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


@contextlib.contextmanager
def nginx_proxy(binary: str, conf_dir: Path, up_port: int, log: Path) -> Iterator[tuple[str, int]]:
    """nginx (one worker, kept-alive upstream connections) in front of 127.0.0.1:`up_port`,
    configured in `conf_dir`, ready; yields its URL and pid."""
    conf_dir.mkdir(exist_ok=True)
    port = free_port()
    (conf_dir / "nginx.conf").write_text(NGINX_CONF.format(dir=conf_dir, up=up_port, port=port))
    with Child([binary, "-p", str(conf_dir), "-c", str(conf_dir / "nginx.conf")], log) as child:
        wait_port(port, child.proc)
        yield f"http://127.0.0.1:{port}", child.pid


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


@contextlib.contextmanager
def halt_poll_ns(value: int | None) -> Iterator[int | None]:
    """kit.halt_poll_ns, only under the shared bench lock: the setting is
    machine-global, so no other benchmark may run while it is changed."""
    if value is not None and not bench_lock_held_by_ancestor():
        raise RuntimeError(
            f"--halt-poll-ns changes {HALT_POLL}, machine-global: run the bench under "
            f"`flock {BENCH_LOCK} ...` so no other benchmark sees the change"
        )
    with kit.halt_poll_ns(value) as before:
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


def overhead_rounds(b: Bench, urls: dict[str, str], trace: Path, tag: str, pids: dict[str, int]) -> dict:
    """Alternating rounds over `urls`; the order rotates every round so no path always
    runs first (after an idle gap) or last. `pids`: the proxy process of each proxied path,
    whose CPU time over all rounds is divided by the requests it served."""
    a = b.a
    names = list(urls)
    rounds: dict[str, list[dict]] = {k: [] for k in names}
    pooled: dict[str, list[float]] = {k: [] for k in names}
    sent = dict.fromkeys(names, 0)
    cpu_before = {k: cpu_s(pid) for k, pid in pids.items()}
    for i in range(a.overhead_rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            out, _wall = b.load(
                urls[name],
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
    overhead = overhead_vs_direct(names, rounds, latency, tag)
    return {"latency": latency, "per_round": rounds, "overhead_us": overhead, "proxy_cpu": cpu}


def overhead_vs_direct(names: list[str], rounds: dict[str, list[dict]], latency: dict, tag: str) -> dict:
    """Each proxied path's latency minus direct's: per round (means and medians), the median of
    the round means (the verdict, OVERHEAD_PASS_RULE) and pooled over all rounds."""
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
    return overhead


def measure_overhead(b: Bench, capacity: str) -> dict:
    """Proxy overhead at low load, the same run: the upstream's /ping (no backend work)
    at --overhead-rate requests/s (open model, kept-alive connections), directly, through
    the gatekeeper (fifo), through the gatekeeper with --busy-poll-us N
    (--overhead-busy-poll-us) and, as a reference, through nginx (one worker, kept-alive
    upstream connections); optionally through a second gatekeeper binary
    (--overhead-baseline-bin, e.g. an older build's). CPU per request of each proxy:
    its CPU time over the rounds (schedstat of its threads and child processes) divided by
    the requests sent through it; between rounds an idle proxy uses no CPU (busy polling
    stops N us after the last event), so this is the CPU its requests cost. Many short rounds alternate
    between the paths, the order rotating every round, so that a noisy neighbour or a host
    stall hits all of them alike. Latency: send start to last byte of each completed
    request (generator lateness excluded), without the first 10% of each round. Overhead
    of a path = its latency minus direct's: per round (mean and median), the median over
    rounds of the per-round means, and pooled over all rounds (mean and median).
    With --halt-poll-ns N every round set runs twice, with the machine's setting and with
    the guest halt-polling set to N, reported side by side.
    """
    a = b.a
    trace = b.work / "overhead.csv"
    write_trace(trace, [("/ping", 1.0)], a.overhead_rate, a.overhead_duration, a.seed)
    with contextlib.ExitStack() as stack:
        up = stack.enter_context(b.upstream())
        urls, pids = _start_paths(b, stack, up.url, up.port, capacity)
        settings = _rounds_by_setting(b, urls, trace, pids)
    return {
        "rate_per_s": a.overhead_rate,
        "rounds": a.overhead_rounds,
        "round_s": a.overhead_duration,
        "paths": list(urls),
        "baseline_bin": a.overhead_baseline_bin,
        # The verdict's figures: the machine's own halt-polling setting, as our binary must
        # not depend on it.
        "busy_poll_us": a.overhead_busy_poll_us or None,
        **{k: settings["machine"][k] for k in ("latency", "per_round", "overhead_us", "proxy_cpu")},
        "by_halt_poll_setting": settings,
        "pass_rule": OVERHEAD_PASS_RULE,
        "method": measure_overhead.__doc__,
    }


def _start_paths(
    b: Bench, stack: contextlib.ExitStack, up_url: str, up_port: int, capacity: str
) -> tuple[dict[str, str], dict[str, int]]:
    """Starts every proxy the options ask for in front of the upstream (each closed by
    ``stack``); returns each path's URL, direct's first, and each proxy's pid."""
    a = b.a
    urls = {"direct": up_url}
    pids = {}
    proxies: dict[str, dict] = {"gatekeeper": {}}
    if a.overhead_busy_poll_us:
        proxies["gatekeeper-busy-poll"] = {"extra": ["--busy-poll-us", str(a.overhead_busy_poll_us)]}
    if a.overhead_baseline_bin:
        proxies["gatekeeper-baseline"] = {"binary": a.overhead_baseline_bin}
    for name, how in proxies.items():
        g = stack.enter_context(b.proxy(up_url, "fifo", capacity, max_queue_wait_s=a.max_queue_wait_s, **how))
        urls[name] = g.url
        pids[name] = g.pid
    nginx = nginx_binary()
    if a.overhead_nginx == "yes" and not nginx:
        raise RuntimeError("--overhead-nginx yes: nginx not found")
    if nginx and a.overhead_nginx != "no":
        urls["nginx"], pids["nginx"] = stack.enter_context(
            nginx_proxy(nginx, b.work / "nginx", up_port, b.work / "nginx.log")
        )
    return urls, pids


def _rounds_by_setting(b: Bench, urls: dict[str, str], trace: Path, pids: dict[str, int]) -> dict:
    """The rounds under the machine's halt-polling setting and, with --halt-poll-ns N, again
    with it set to N; keyed ``machine`` and ``halt_poll_<N>``."""
    a = b.a
    settings = {}
    machine_value = read_halt_poll()
    r = overhead_rounds(b, urls, trace, "", pids)
    settings["machine"] = {"guest_halt_poll_ns": machine_value, **r}
    if a.halt_poll_ns is not None:
        with halt_poll_ns(a.halt_poll_ns):
            r = overhead_rounds(b, urls, trace, f"-hp{a.halt_poll_ns}", pids)
        settings[f"halt_poll_{a.halt_poll_ns}"] = {"guest_halt_poll_ns": a.halt_poll_ns, **r}
    return settings


#: The fixed capacity of --only-overhead runs (no calibration): /ping costs well under a
#: millisecond and at most a few are in flight at the overhead rate, so any capacity above a
#: few milliseconds admits every request at once, as the calibrated one does.
ONLY_OVERHEAD_CAPACITY = "1000ms"
