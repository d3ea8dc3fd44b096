#!/usr/bin/env python3
"""make bench-serve: shortfirst serve vs nginx, side by side, with wrk.

Serves the same generated files (1 KiB and 100 KiB) from both servers on
loopback, drives each with the same wrk settings, alternating the order of
the servers between rounds, and writes results/bench-serve.json: requests/s
and latency percentiles per server and file, the ratios shortfirst/nginx, the
machine and the command.

Both servers: 2 workers (nginx worker_processes 2; shortfirst --threads 2),
sendfile, keep-alive (10,000 requests per connection), and a buffered access
log to a file (nginx `buffer=64k flush=1s`; shortfirst's log is always
buffered). shortfirst runs twice: in kernel mode with its default policy
(srpt, SO_PRIORITY set per band), and as ``shortfirst-user``, with its own
uplink scheduler (``--scheduler user --policy srpt``: every write waits for a
grant from the pacer and the SRPT pick). The user scheduler's rate
(``--user-uplink-rate``, default far above what loopback carries) keeps the
pacer from being the bottleneck, so the bench measures what the scheduling
costs, not a rate limit; the target is requests/s and p99 within 0.9 of nginx.
A third shortfirst, ``shortfirst-srrt``, is the kernel mode with ``--policy srrt``:
the same SO_PRIORITY bands as srpt, ranked by the remaining response time
estimated from ``getsockopt(TCP_INFO)`` (one read at each response's start and
one per 64 KiB written). Its server CPU per request beside ``shortfirst``'s
(same run, same rounds) is what SRRT costs over SRPT (``srrt_vs_srpt``).
``--servers`` runs a subset (the ratios need their two servers).

The same run then measures HTTPS (``--parts``: ``plain``, ``tls``, both by default):
``shortfirst-user`` beside nginx and h2o, each with TLS 1.2/1.3 and HTTP/2 on, one
self-signed ECDSA certificate, the same docroot, driven by h2load over HTTP/1.1 and HTTP/2
at 1 KiB, 100 KiB and 10 MiB with 64 and 10,000 connections: requests/s, bytes/s, server
CPU seconds per GB and the memory of an idle TLS connection (`shortfirst_lab.runners.tlsbench`).
Beside them, over HTTP/2, the floor of the crates serve is built on (``--floor-bin``, built
by ``make bench-serve``: the ``h2`` crate and rustls answering from memory), never a peer.

Runs with the lab's venv python (it imports shortfirst_lab.kit). Every child process is
killed on exit, error or signal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shortfirst_lab.kit import (
    KitError,
    free_port,
    git_commit,
    process_cpu_s,
    self_signed_cert,
    wait_http,
    write_json,
    wrk,
)
from shortfirst_lab.kit import machine as base_machine
from shortfirst_lab.runners import tlsbench

FILES = {"1k.bin": 1024, "100k.bin": 100 * 1024}
CHILDREN: list[subprocess.Popen] = []

NGINX_CONF = """
worker_processes 2;
daemon off;
master_process on;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 60s;
    keepalive_requests 10000;
    access_log {tmp}/nginx-access.log combined buffer=64k flush=1s;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port} reuseport backlog=4096;
        root {root};
    }}
}}
"""


def kill_children() -> None:
    for p in CHILDREN:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in CHILDREN:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    CHILDREN.clear()


def on_signal(signum, _frame):
    kill_children()
    sys.exit(128 + signum)


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(name: str, argv: list[str], port: int, log: Path) -> subprocess.Popen:
    if port_in_use(port):
        raise SystemExit(f"bench-serve: port {port} already in use")
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    CHILDREN.append(proc)
    try:
        wait_http(f"http://127.0.0.1:{port}/1k.bin", proc, timeout_s=10)
    except KitError as e:
        raise SystemExit(f"bench-serve: {name}: {e}") from None
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    CHILDREN.remove(proc)


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a server process and its children (nginx workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return process_cpu_s(pid) + sum(process_cpu_s(int(c)) for c in children)


def run_wrk(args, port: int, path: str) -> dict:
    result = wrk(f"http://127.0.0.1:{port}{path}", args.threads, args.connections, args.duration)
    if result["non_2xx"] or result["socket_errors"]:
        print(f"bench-serve: warning: wrk on {path} had errors: {result}", file=sys.stderr)
    return result


def tool_version(argv: list[str]) -> str:
    """The first line a tool prints about its version ("" if it is absent)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError:
        return ""
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else ""


def machine() -> dict:
    return {
        **base_machine(),
        "nginx": tool_version(["nginx", "-v"]),
        "wrk": tool_version(["wrk", "-v"]),
        "h2o": tool_version(["h2o", "--version"]),
        "h2load": tool_version(["h2load", "--version"]),
        "openssl": tool_version(["openssl", "version"]),
    }


#: The shortfirst variants measured against nginx: extra `serve` arguments each.
def shortfirst_variants(user_uplink_rate: str) -> dict[str, list[str]]:
    return {
        "shortfirst": [],
        "shortfirst-user": ["--scheduler", "user", "--link-rate", user_uplink_rate, "--policy", "srpt"],
        "shortfirst-srrt": ["--policy", "srrt"],
    }


def server_names(user_uplink_rate: str) -> list[str]:
    return ["nginx", *shortfirst_variants(user_uplink_rate)]


def setup_servers(
    binary: Path, tmp: Path, user_uplink_rate: str, names: list[str]
) -> dict[str, tuple[list[str], int]]:
    """The files every server serves, in ``tmp``, and the command line and port of each server
    in ``names``."""
    root = tmp / "www"
    root.mkdir()
    for name, size in FILES.items():
        (root / name).write_bytes(bytes(i % 251 for i in range(size)))
    nginx_port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=nginx_port, root=root))
    servers = {"nginx": (["nginx", "-c", str(conf), "-p", str(tmp)], nginx_port)} if "nginx" in names else {}
    for name, extra in shortfirst_variants(user_uplink_rate).items():
        if name not in names:
            continue
        port = free_port()
        while port in {p for _, p in servers.values()}:
            port = free_port()
        argv = [str(binary), "serve", "--root", str(root), "--listen", f"127.0.0.1:{port}", "--threads", "2"]
        argv += [
            "--max-requests-per-connection",
            "10000",
            "--access-log",
            str(tmp / f"{name}-access.log"),
            *extra,
        ]
        servers[name] = (argv, port)
    return servers


def run_rounds(args: argparse.Namespace, servers: dict, tmp: Path) -> list[dict]:
    """Every round: each server started, warmed and measured on each file (order alternating
    between rounds), its CPU per request from its own CPU time."""
    runs = []
    for rnd in range(args.rounds):
        names = list(servers)
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            argv, port = servers[name]
            proc = start(name, argv, port, tmp / f"{name}.out")
            try:
                for path in FILES:
                    if args.warmup:
                        warm = argparse.Namespace(**{**vars(args), "duration": args.warmup})
                        run_wrk(warm, port, f"/{path}")
                    cpu_before_s = server_cpu_s(proc.pid)
                    r = run_wrk(args, port, f"/{path}")
                    cpu_s = server_cpu_s(proc.pid) - cpu_before_s
                    # CPU per request is far less disturbed by neighbours than
                    # throughput: the efficiency figure on a shared machine.
                    r["server_cpu_us_per_request"] = round(cpu_s * 1e6 / max(1, r["requests"] or 0), 2)
                    r.update(server=name, file=path, size_bytes=FILES[path], round=rnd + 1)
                    print(
                        f"round {rnd + 1} {name:10s} {path:9s} {r['requests_per_s']:>10.0f} req/s  "
                        f"p50 {r['latency_ms'].get('p50')} ms  p99 {r['latency_ms'].get('p99')} ms  "
                        f"cpu {r['server_cpu_us_per_request']} us/req",
                        flush=True,
                    )
                    runs.append(r)
            finally:
                stop(proc)

    return runs


def summarize(runs: list[dict], servers: dict) -> dict:
    """Per file, each server's medians over rounds and the ratios shortfirst/nginx
    (``ratio_*``: kernel mode; ``user_scheduler``: the same for shortfirst-user)."""
    summary = {}
    for path in FILES:
        per = {}
        for name in servers:
            rs = [r for r in runs if r["server"] == name and r["file"] == path]
            # Medians over rounds: the machine is shared, and one round
            # disturbed by a neighbour should not decide the ratio.
            per[name] = {
                "requests_per_s": round(statistics.median(r["requests_per_s"] for r in rs), 1),
                "latency_ms": {
                    p: round(statistics.median(r["latency_ms"][p] for r in rs), 4)
                    for p in ("p50", "p90", "p99")
                },
                "server_cpu_us_per_request": round(
                    statistics.median(r["server_cpu_us_per_request"] for r in rs), 2
                ),
                "requests_per_s_per_round": [r["requests_per_s"] for r in rs],
            }
        summary[path] = dict(per)
        if "shortfirst" in per and "nginx" in per:
            rps_ratio, p99_ratio, cpu_ratio = ratios(per, "shortfirst")
            summary[path] |= {
                "ratio_requests_per_s": round(rps_ratio, 3),
                "ratio_p99": round(p99_ratio, 3),
                "ratio_server_cpu_per_request": round(cpu_ratio, 3),
                "target_met": rps_ratio >= 1.0 and p99_ratio <= 1.0,
            }
        if "shortfirst-srrt" in per and "shortfirst" in per:
            rps_ratio, p99_ratio, cpu_ratio = ratios(per, "shortfirst-srrt", "shortfirst")
            srrt, srpt = per["shortfirst-srrt"], per["shortfirst"]
            summary[path]["srrt_vs_srpt"] = {
                "ratio_requests_per_s": round(rps_ratio, 3),
                "ratio_p99": round(p99_ratio, 3),
                "ratio_server_cpu_per_request": round(cpu_ratio, 3),
                "extra_server_cpu_us_per_request": round(
                    srrt["server_cpu_us_per_request"] - srpt["server_cpu_us_per_request"], 2
                ),
            }
        if "shortfirst-user" in per and "nginx" in per:
            rps_ratio, p99_ratio, cpu_ratio = ratios(per, "shortfirst-user")
            summary[path]["user_scheduler"] = {
                "ratio_requests_per_s": round(rps_ratio, 3),
                "ratio_p99": round(p99_ratio, 3),
                "ratio_server_cpu_per_request": round(cpu_ratio, 3),
                # The bar for the scheduler: within 0.9 of nginx.
                "target_met": rps_ratio >= 0.9 and p99_ratio <= 1 / 0.9,
            }
    return summary


def ratios(per: dict, name: str, base: str = "nginx") -> tuple[float, float, float]:
    """requests/s, p99 and server CPU per request of ``name`` over ``base``'s."""
    rps = per[name]["requests_per_s"] / per[base]["requests_per_s"]
    p99 = per[name]["latency_ms"]["p99"] / per[base]["latency_ms"]["p99"]
    cpu = per[name]["server_cpu_us_per_request"] / max(1e-9, per[base]["server_cpu_us_per_request"])
    return rps, p99, cpu


def parse_args() -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--bin", default="target/release/shortfirst")
    ap.add_argument("--out", default="results/bench-serve.json")
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--connections", type=int, default=64, help="wrk connections")
    ap.add_argument("--rounds", type=int, default=4, help="rounds; the server order alternates")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of unrecorded load before each run")
    ap.add_argument(
        "--user-uplink-rate",
        default="40gbit",
        help="shortfirst-user's --link-rate: above what loopback carries, so the pacer never binds",
    )
    ap.add_argument(
        "--servers",
        default=",".join(server_names("")),
        help="comma-separated servers to run (default: all): " + ", ".join(server_names("")),
    )
    ap.add_argument(
        "--parts", default="plain,tls", help="plain (wrk, cleartext), tls (h2load, HTTPS), or both"
    )
    ap.add_argument(
        "--tls-scale",
        type=float,
        default=1.0,
        help="times the requests of each h2load cell (shorter: below 1)",
    )
    ap.add_argument("--tls-connections", default="64,10000", help="comma-separated h2load connection counts")
    ap.add_argument(
        "--h2-streams", type=int, default=8, help="HTTP/2 streams h2load keeps open per connection"
    )
    ap.add_argument(
        "--idle-connections", type=int, default=1000, help="idle TLS connections for the memory figure"
    )
    ap.add_argument(
        "--tls-rounds",
        type=int,
        default=1,
        help=f"rounds of the TLS half (1..{tlsbench.MAX_ROUNDS}), the order reversed every other one",
    )
    ap.add_argument(
        "--tls-servers",
        default=",".join(TLS_SERVERS),
        help="comma-separated servers of the TLS half (default: all): " + ", ".join(TLS_SERVERS),
    )
    ap.add_argument(
        "--floor-bin",
        default="target/release/examples/h2_floor",
        help="the HTTP/2 floor (cargo build --release --example h2_floor); 'none' leaves it out",
    )
    return ap.parse_args()


def tls_settings(args: argparse.Namespace) -> tlsbench.TlsSettings:
    """The TLS half's settings from the command line (a bad connection list: SystemExit)."""
    try:
        connections = tuple(int(c) for c in args.tls_connections.split(",") if c.strip())
    except ValueError:
        raise SystemExit(
            f"bench-serve: --tls-connections {args.tls_connections!r}: not a list of numbers"
        ) from None
    if not connections or min(connections) < 1:
        raise SystemExit(
            f"bench-serve: --tls-connections {args.tls_connections!r}: give counts of at least 1"
        )
    return tlsbench.TlsSettings(
        scale=args.tls_scale,
        connections=connections,
        h2_streams=args.h2_streams,
        idle_connections=args.idle_connections,
    )


def run_tls(args: argparse.Namespace, binary: Path, tmp: Path) -> dict:
    """The HTTPS half: nginx, h2o and shortfirst-user over TLS with h2load; the report's `tls`."""
    settings = tls_settings(args)
    root = tmp / "www"
    root.mkdir(exist_ok=True)
    tlsbench.write_files(root)
    cert_key = self_signed_cert(tmp)
    tlsbench.private_loopback()  # from here on, this process and its children
    ports: list[int] = []
    while len(ports) < 5:
        if (p := free_port()) not in ports:
            ports.append(p)
    user = shortfirst_variants(args.user_uplink_rate)["shortfirst-user"]
    floor = None if args.floor_bin == "none" else Path(args.floor_bin).resolve()
    servers = tlsbench.tls_servers(binary, tmp, root, cert_key, ports, user, floor)
    servers = [s for s in servers if s.name in tls_names(args)]
    say = lambda line: print(line, flush=True)  # noqa: E731 - one line of progress
    runs, idle = tlsbench.run_servers(servers, tmp, settings, say, args.tls_rounds)
    return {
        "tool": "h2load, one thread, a fixed number of requests per cell (-n); server CPU over the whole run",
        "rounds": f"{args.tls_rounds}, the servers' order reversed every other round; medians over rounds",
        "settings": vars(settings),
        "network": f"a network namespace of its own, loopback only, somaxconn and tcp_max_syn_backlog "
        f"{tlsbench.BACKLOG}, every server's listen backlog {tlsbench.BACKLOG}",
        "certificate": "self-signed ECDSA P-256 (openssl req -x509 -newkey ec), one for every server",
        "files": tlsbench.TLS_FILES,
        "servers": {s.name: {"argv": s.argv, "config": s.config.strip().splitlines()} for s in servers},
        "idle_memory": idle,
        "summary": tlsbench.summarize(runs),
        "runs": runs,
    }


def report_doc(
    args: argparse.Namespace, names: list[str], machine_at_start: dict, runs: list, summary: dict, tls: dict
) -> dict:
    """The JSON the bench writes: what ran, on what, with which settings, and the results."""
    return {
        "benchmark": "bench-serve",
        "command": " ".join([sys.argv[0], *sys.argv[1:]]),
        "servers": names,
        "git_commit": git_commit(),
        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_at_start,
        "loadavg_at_end": list(os.getloadavg()),
        "wrk": {"threads": args.threads, "connections": args.connections, "duration_s": args.duration},
        "rounds": args.rounds,
        "aggregation": "median over rounds of each server's requests/s and latency percentiles",
        "settings": {
            "workers": "2 (nginx worker_processes 2, shortfirst --threads 2)",
            "shortfirst_variants": shortfirst_variants(args.user_uplink_rate),
            "access_log": "on for both, buffered to a file (nginx buffer=64k flush=1s)",
            "keepalive_requests": 10000,
            "shortfirst_policy": "srpt (default cutoffs), SO_PRIORITY on; shortfirst-user: exact srpt, "
            "user-space scheduler; shortfirst-srrt: srrt (default response-time cutoffs, estimator "
            "path), SO_PRIORITY on, TCP_INFO read at each response's start and per 64 KiB",
            "nginx_conf": NGINX_CONF.strip().splitlines(),
        },
        "summary": summary,
        "runs": runs,
        "tls": tls,
    }


def print_ratios(summary: dict) -> None:
    """Each path's ratios against nginx, one line each."""
    for path, s in summary.items():
        if "target_met" in s:
            print(
                f"{path}: shortfirst/nginx requests/s {s['ratio_requests_per_s']}, p99 {s['ratio_p99']}, "
                f"server CPU/request {s['ratio_server_cpu_per_request']}"
                f" (target met: {s['target_met']})"
            )
        if r := s.get("srrt_vs_srpt"):
            print(
                f"{path}: srrt/srpt server CPU/request {r['ratio_server_cpu_per_request']} "
                f"(+{r['extra_server_cpu_us_per_request']} us), requests/s {r['ratio_requests_per_s']}, "
                f"p99 {r['ratio_p99']}"
            )
        if u := s.get("user_scheduler"):
            print(
                f"{path}: shortfirst-user/nginx requests/s {u['ratio_requests_per_s']}, "
                f"p99 {u['ratio_p99']}, server CPU/request {u['ratio_server_cpu_per_request']} "
                f"(target met: {u['target_met']})"
            )


#: The TLS half's servers, by name.
TLS_SERVERS = ("nginx", "h2o", tlsbench.OURS, tlsbench.FLOOR)


def tls_names(args: argparse.Namespace) -> set[str]:
    """The TLS half's servers `--tls-servers` names; SystemExit naming an unknown one."""
    names = {n.strip() for n in args.tls_servers.split(",") if n.strip()}
    if not names or names - set(TLS_SERVERS):
        known = ", ".join(TLS_SERVERS)
        raise SystemExit(f"bench-serve: --tls-servers {args.tls_servers!r}: give some of {known}")
    if args.floor_bin == "none":
        names.discard(tlsbench.FLOOR)
    return names


def check_args(args: argparse.Namespace) -> tuple[list[str], set[str]]:
    """The plaintext servers and the parts to run; SystemExit naming a bad argument or a
    missing tool."""
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    unknown = sorted(set(names) - set(server_names(args.user_uplink_rate)))
    if unknown or not names:
        raise SystemExit(f"bench-serve: --servers: unknown {unknown or names}; known: {server_names('')}")
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"plain", "tls"}:
        raise SystemExit(f"bench-serve: --parts {args.parts!r}: give plain, tls or both")
    tools = {"wrk", *(["nginx"] if "nginx" in names else [])} if "plain" in parts else set()
    tools |= {"h2load", "h2o", "nginx", "openssl"} if "tls" in parts else set()
    for tool in sorted(tools):
        if not shutil.which(tool):
            raise SystemExit(f"bench-serve: {tool} not found (make apt installs it)")
    # The TLS half's servers are checked here, before the plaintext half runs.
    tls = tls_names(args) if "tls" in parts else set()
    if tlsbench.FLOOR in tls and not Path(args.floor_bin).is_file():
        raise SystemExit(
            f"bench-serve: --floor-bin {args.floor_bin}: not built (cargo build --release --locked "
            "-p shortfirst-server --example h2_floor, or --floor-bin none)"
        )
    return names, parts


def print_tls(summary: dict) -> None:
    """Each TLS cell's ratios of shortfirst-user against the better peer and nginx."""
    for cell, row in summary.items():
        if "ratio_bytes_per_s_vs_best_peer" not in row:
            print(f"tls {cell}: no ratio (a server failed: see the runs)")
            continue
        met = {k: v for k, v in row.items() if k.startswith("target_")}
        print(
            f"tls {cell}: shortfirst-user/best peer requests/s {row['ratio_requests_per_s_vs_best_peer']}, "
            f"bytes/s {row['ratio_bytes_per_s_vs_best_peer']}; CPU/GB vs nginx "
            f"{row.get('ratio_server_cpu_per_gb_vs_nginx')} {met}"
            + (
                f"; vs the floor: shortfirst-user {row['ratio_requests_per_s_vs_floor']}, "
                f"best peer {row['ratio_best_peer_requests_per_s_vs_floor']}"
                if "ratio_requests_per_s_vs_floor" in row
                else ""
            )
        )


def main() -> int:
    args = parse_args()
    names, parts = check_args(args)
    binary = Path(args.bin).resolve()
    if not binary.exists():
        raise SystemExit(f"bench-serve: {binary} not built")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # The machine (load average included) as it was before the bench loaded it.
    machine_at_start = machine()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    try:
        runs, summary = [], {}
        if "plain" in parts:
            servers = setup_servers(binary, tmp, args.user_uplink_rate, names)
            runs = run_rounds(args, servers, tmp)
            summary = summarize(runs, servers)
        tls = {}
        if "tls" in parts:
            try:
                tls = run_tls(args, binary, tmp)
            except KitError as e:  # the plaintext half's figures are kept
                print(f"bench-serve: the TLS half failed: {e}", file=sys.stderr)
                tls = {"error": str(e)}
        report = report_doc(args, names, machine_at_start, runs, summary, tls)
        out = Path(args.out)
        write_json(out, report, allow_nan=True)
        print_ratios(summary)
        print_tls(tls.get("summary", {}))
        print(f"wrote {out}")
        return 0
    finally:
        kill_children()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
