#!/usr/bin/env python3
"""make bench-load: the highest open-model rate one `shortfirst load` sustains.

Against one local `shortfirst serve` (1 KiB files), step the open-model
request rate up (a few seconds per step) and record, per step, the
generator's lateness p99, whether the step was sustained (lateness p99 <= 1 ms,
every request completed, none refused by the in-flight limit, achieved rate
>= 95% of the target), and the response times. Two connection modes:
one connection per request (the papers' model) and keep-alive (--persistent).
Beside it, in the same run, `wrk` at its maximum against the same server:
with `Connection: close` (one connection per request) and with keep-alive.
Writes results/bench-load.json with the rates tried, the maximum sustained
rate per mode, wrk's requests/s, the ratios, the machine and the command.

This machine is shared; absolute figures move with its load, so the load
average at the start and end is recorded too. Standard library only; every
child process is killed on exit, error or signal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILDREN: list[subprocess.Popen] = []


def cleanup(*_args) -> None:
    for p in CHILDREN:
        if p.poll() is None:
            p.kill()
            p.wait()
    if _args:
        sys.exit(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench-load: server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"bench-load: server not answering on port {port}")


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "loadavg_1m": os.getloadavg()[0],
    }


def wrk(port: int, path: str, close: bool, seconds: int, threads: int, conns: int) -> dict:
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(f"http://127.0.0.1:{port}{path}")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    if not m:
        raise SystemExit(f"bench-load: cannot parse wrk output:\n{out.stdout}{out.stderr}")
    errors = re.search(r"Socket errors: (.*)", out.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    return {
        "argv": argv,
        "req_per_s": float(m.group(1)),
        "socket_errors": errors.group(1) if errors else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def step(binary: str, port: int, trace: Path, out: Path, rate: int, seconds: float, extra: list[str]) -> dict:
    argv = [
        binary,
        "load",
        "--target",
        f"http://127.0.0.1:{port}",
        "--trace",
        str(trace),
        "--out",
        str(out),
        "--rate",
        str(rate),
        "--duration",
        str(seconds),
        "--quiet",
        "--max-in-flight",
        "20000",
        "--timeout",
        "10",
        *extra,
    ]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if res.returncode != 0:
        raise SystemExit(f"bench-load: {' '.join(argv)} failed:\n{res.stderr}")
    s = json.loads((out / "summary.json").read_text())
    achieved = s.get("achieved_req_per_s") or 0.0
    lat = s.get("lateness_p99_ms")
    sustained = (
        lat is not None
        and lat <= 1.0
        and s["completed"] == s["requests"]
        and s["not_sent_in_flight_limit"] == 0
        and achieved >= 0.95 * rate
    )
    shutil.rmtree(out)
    return {
        "target_req_per_s": rate,
        "achieved_req_per_s": achieved,
        "requests": s["requests"],
        "completed": s["completed"],
        "failed": s["failed"],
        "timeout": s["timeout"],
        "not_sent_in_flight_limit": s["not_sent_in_flight_limit"],
        "lateness_p50_ms": s.get("lateness_p50_ms"),
        "lateness_p99_ms": lat,
        "lateness_max_ms": s.get("lateness_max_ms"),
        "p50_response_s": s.get("p50_response_s"),
        "p99_response_s": s.get("p99_response_s"),
        "valid": s["valid"],
        "sustained": sustained,
        "argv": res.args,
    }


def peak_rss(binary: str, port: int, trace: Path, tmp: Path) -> dict:
    """Peak RSS of `shortfirst load` for a short and a 4x longer run at the same rate:
    bounded memory means the two peaks are about equal."""
    runs = []
    for seconds in (2, 8):
        out = tmp / f"mem-{seconds}"
        argv = [binary, "load", "--target", f"http://127.0.0.1:{port}", "--trace", str(trace)]
        argv += ["--out", str(out), "--rate", "5000", "--duration", str(seconds), "--quiet"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        CHILDREN.append(proc)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"bench-load: {' '.join(argv)} exited with {proc.returncode}")
        requests = json.loads((out / "summary.json").read_text())["requests"]
        runs.append({"requests": requests, "peak_rss_kib": usage.ru_maxrss, "argv": argv})
        shutil.rmtree(out)
    return {"runs": runs, "rss_ratio_long_over_short": runs[1]["peak_rss_kib"] / runs[0]["peak_rss_kib"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", default="target/release/shortfirst")
    ap.add_argument("--out", default="results/bench-load.json")
    ap.add_argument("--rates", default="5000,10000,15000,20000,25000,30000,40000,50000")
    ap.add_argument("--step-seconds", type=float, default=4.0)
    ap.add_argument("--wrk-seconds", type=int, default=5)
    args = ap.parse_args()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, cleanup)
    for tool in ("wrk",):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench-load: {tool} not found (make apt installs it)")
    binary = str(Path(args.bin).resolve())
    if not Path(binary).exists():
        raise SystemExit(f"bench-load: {binary} not built")
    rates = [int(r) for r in args.rates.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    started = machine()
    try:
        wl = tmp / "wl"
        n = int(max(rates) * args.step_seconds * 1.2) + 1000
        subprocess.run(
            [binary, "workload", "generate", "--kind", "fixed:1024", "--files", "1000"]
            + ["--requests", str(n), "--rate", "1000", "--seed", "1", "--out", str(wl)],
            check=True,
        )
        port = free_port()
        serve_argv = [binary, "serve", "--root", str(wl / "docroot"), "--listen", f"127.0.0.1:{port}"]
        if os.geteuid() != 0:
            serve_argv.append("--socket-priority=false")
        server = subprocess.Popen(serve_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        CHILDREN.append(server)
        wait_port(port, server)

        modes = {"one_connection_per_request": [], "persistent_100": ["--persistent", "100"]}
        steps: dict[str, list] = {}
        for mode, extra in modes.items():
            steps[mode] = []
            misses = 0
            for rate in rates:
                r = step(
                    binary, port, wl / "trace.csv", tmp / f"run-{mode}-{rate}", rate, args.step_seconds, extra
                )
                print(
                    f"bench-load: {mode} {rate}/s -> achieved {r['achieved_req_per_s']:.0f}/s, "
                    f"lateness p99 {r['lateness_p99_ms']} ms, sustained {r['sustained']}",
                    file=sys.stderr,
                )
                steps[mode].append(r)
                misses = 0 if r["sustained"] else misses + 1
                if misses >= 2:
                    break
        memory = peak_rss(binary, port, wl / "trace.csv", tmp)
        wrk_close = wrk(port, "/f/0000000.bin", True, args.wrk_seconds, 2, 64)
        wrk_keep = wrk(port, "/f/0000000.bin", False, args.wrk_seconds, 2, 64)
        best = {
            mode: max((s["target_req_per_s"] for s in ss if s["sustained"]), default=0)
            for mode, ss in steps.items()
        }
        result = {
            "benchmark": "bench-load",
            "description": "highest open-model rate one shortfirst load process sustains with lateness "
            "p99 <= 1 ms against shortfirst serve (1 KiB files), beside wrk at its maximum",
            "server": serve_argv,
            "step_seconds": args.step_seconds,
            "steps": steps,
            "max_sustained_req_per_s": best,
            "wrk": {"connection_close": wrk_close, "keep_alive": wrk_keep},
            "ratio_vs_wrk": {
                "one_connection_per_request": best["one_connection_per_request"] / wrk_close["req_per_s"],
                "persistent_100": best["persistent_100"] / wrk_keep["req_per_s"],
            },
            "target_req_per_s": 20000,
            "meets_target": best["one_connection_per_request"] >= 20000 or best["persistent_100"] >= 20000,
            "machine": started,
            "loadavg_1m_end": os.getloadavg()[0],
            "command": " ".join(sys.argv),
            "memory": memory,
            "note": "generator, server and wrk share the same CPUs (shared machine)",
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_suffix(".json.tmp")
        tmp_out.write_text(json.dumps(result, indent=2) + "\n")
        tmp_out.rename(out)
        print(
            json.dumps(
                {"max_sustained_req_per_s": best, "wrk": [wrk_close["req_per_s"], wrk_keep["req_per_s"]]}
            )
        )
    finally:
        cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
