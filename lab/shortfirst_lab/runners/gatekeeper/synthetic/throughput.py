"""The proxy's cost at saturation, beside nginx: a `shortfirst serve` upstream with a 1 KB
file, driven by wrk's closed loops (8 kept-alive connections by default) directly, through
the gatekeeper (fifo, a capacity that never queues) and through nginx's `proxy_pass` with a
kept-alive upstream, in alternating rounds whose order rotates, so a noisy neighbour hits
every path alike. Per path: requests/s and the median latency, each the median over rounds;
a proxy's added median is its median latency minus direct's in the same round.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
from pathlib import Path

from .... import commands
from ....kit import Child, KitError, free_port, wait_port, wrk
from .overhead import ONLY_OVERHEAD_CAPACITY, nginx_binary, nginx_proxy
from .points import Bench

#: The pass rule of the section, stated in the output beside the figures.
THROUGHPUT_PASS_RULE = (
    "pass if the gatekeeper's added median latency (its median minus direct's, median over "
    "rounds) is at most nginx's, and its requests/s (median over rounds) at least nginx's."
)
#: The file the upstream serves, and its size.
FILE_NAME = "1k.bin"
FILE_BYTES = 1024


def measure_throughput(b: Bench, rounds: int, duration_s: float, connections: int, threads: int) -> dict:
    """Alternating wrk rounds over direct, gatekeeper and nginx (see the module docs)."""
    nginx = nginx_binary()
    if not nginx:
        raise KitError("throughput rounds need nginx (apt-get install nginx) as the reference")
    if not shutil.which("wrk"):
        raise KitError("throughput rounds need wrk (apt-get install wrk)")
    root = b.work / "throughput-root"
    root.mkdir(exist_ok=True)
    (root / FILE_NAME).write_bytes(bytes(range(256)) * (FILE_BYTES // 256))
    with contextlib.ExitStack() as stack:
        urls = _start(b, stack, root, nginx)
        per_round = _rounds(urls, rounds, duration_s, connections, threads)
    return summarize(per_round) | {
        "connections": connections,
        "threads": threads,
        "rounds": rounds,
        "round_s": duration_s,
        "file_bytes": FILE_BYTES,
        "pass_rule": THROUGHPUT_PASS_RULE,
    }


def _start(b: Bench, stack: contextlib.ExitStack, root: Path, nginx: str) -> dict[str, str]:
    """The upstream, the gatekeeper and nginx in front of it; each path's URL."""
    up = free_port()
    argv = commands.serve(b.bin, root=root, listen=f"127.0.0.1:{up}", policy="fair", threads=1)
    stack.enter_context(Child(argv, b.work / "throughput-serve.log"))
    wait_port(up)
    gate = stack.enter_context(b.proxy(f"http://127.0.0.1:{up}", "fifo", ONLY_OVERHEAD_CAPACITY))
    ng, _ = stack.enter_context(nginx_proxy(nginx, b.work / "throughput-nginx", up, b.work / "nginx-tp.log"))
    return {"direct": f"http://127.0.0.1:{up}", "gatekeeper": gate.url, "nginx": ng}


def _rounds(
    urls: dict[str, str], rounds: int, duration_s: float, connections: int, threads: int
) -> list[dict[str, dict]]:
    """`rounds` rounds, each path once per round, the order rotating; a warm-up run per
    path first (not kept)."""
    names = list(urls)
    for name in names:
        wrk(f"{urls[name]}/{FILE_NAME}", threads, connections, min(duration_s, 2.0))
    out = []
    for i in range(rounds):
        order = names[i % len(names) :] + names[: i % len(names)]
        r = {}
        for name in order:
            res = wrk(f"{urls[name]}/{FILE_NAME}", threads, connections, duration_s)
            if res["non_2xx"] or res["socket_errors"]:
                raise KitError(f"throughput round {i}: {name} had errors: {res}")
            r[name] = res
        out.append(r)
    return out


def summarize(per_round: list[dict[str, dict]]) -> dict:
    """Per path the medians over rounds of requests/s and median latency; per proxy the
    median over rounds of its added median (its p50 minus direct's in the same round); the
    gatekeeper's figures over nginx's; the verdict."""
    paths = list(per_round[0])
    med = {
        p: {
            "requests_per_s": statistics.median(r[p]["requests_per_s"] for r in per_round),
            "p50_ms": statistics.median(r[p]["latency_ms"]["p50"] for r in per_round),
            "p99_ms": statistics.median(r[p]["latency_ms"]["p99"] for r in per_round),
        }
        for p in paths
    }
    added_us = {
        p: statistics.median(
            1e3 * (r[p]["latency_ms"]["p50"] - r["direct"]["latency_ms"]["p50"]) for r in per_round
        )
        for p in paths
        if p != "direct"
    }
    gk, ng = med["gatekeeper"], med["nginx"]
    return {
        "paths": med,
        "added_median_us": added_us,
        "gatekeeper_over_nginx": {
            "requests_per_s": gk["requests_per_s"] / ng["requests_per_s"],
            "added_median": added_us["gatekeeper"] / added_us["nginx"] if added_us["nginx"] > 0 else None,
        },
        "pass": added_us["gatekeeper"] <= added_us["nginx"] and gk["requests_per_s"] >= ng["requests_per_s"],
        "per_round": per_round,
    }
