"""The HTTPS and HTTP/2 half of `make bench-serve`: `shortfirst serve` with its user-space
scheduler beside nginx and h2o, all three with TLS and HTTP/2 on, driven by h2load; and,
when built, the HTTP/2 floor (`crates/server/examples/h2_floor.rs`: the `h2` crate and
rustls alone, answering from memory), which no server on those crates passes: what serve
adds to it and how far it sits from h2o are then both measured. The floor is not a peer:
no target compares with it.

One self-signed ECDSA P-256 certificate (made here with openssl) and one docroot serve
every server. Each server is started once, fresh: first the memory of idle TLS
connections (`idle_rss`: N connections that each finished a handshake and one request,
then left open; the servers' resident memory before and after, per connection), then one
h2load cell per protocol (HTTP/1.1 and HTTP/2 over TLS), file and connection count.

A cell: h2load with a fixed number of requests (`-n`, at least one per connection), one
h2load thread, handshakes included. (h2load's timing mode, `-D`, hangs after "Stopped all
clients" at a few thousand connections, and now and then at 64 with 10 MiB responses.)
The server's CPU time (every process of its tree, from /proc) is read before h2load starts
and after it ends: CPU seconds per GB (10^9 bytes received by h2load, headers included).
A cell asking for more connections than it has requests (10,000 connections of 10 MiB is
100 GB) runs with one request per connection of its budget instead, saying so.
A cell at more connections than the first that fails (h2load exits with an error, or more
than `FAILED_SHARE_MAX` of its requests fail) is recorded with the reason and retried at
half the connections until one works: the largest that works is what the summary shows.

Standard library only; h2load, nginx, h2o and openssl from Debian (`make apt`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import socket
import ssl
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import Child, KitError, parse_h2load, process_cpu_s, process_rss_bytes

#: The files of the TLS cells: name → size in bytes.
TLS_FILES = {"1k.bin": 1024, "100k.bin": 100 * 1024, "10m.bin": 10 * 1024 * 1024}
#: The protocols of a cell: name → h2load's extra arguments (HTTP/1.1 forced by ALPN).
PROTOCOLS = {"h1": ["--h1"], "h2": []}
#: Each protocol's ALPN name.
ALPN = {"h1": "http/1.1", "h2": "h2"}
#: The server measured against the peers.
OURS = "shortfirst-user"
#: The HTTP/2 floor's name in the runs: measured, never a peer.
FLOOR = "h2-floor"
#: A cell fails when more than this share of the requests h2load started failed or errored.
FAILED_SHARE_MAX = 0.01
#: The fewest connections a failing cell is retried with (halving stops there).
MIN_RETRY_CONNECTIONS = 64
#: Most rounds of the TLS half (each runs every cell of every server again).
MAX_ROUNDS = 9
#: Most lines of h2load output kept in memory per cell (bounds a runaway child's output).
MAX_H2LOAD_LINES = 10_000
#: Every server's listen backlog, and the accept and SYN queues of the bench's own network
#: namespace: 10,000 connections opened at once must not overflow them (the machine's 4096
#: drops SYNs, and h2load waits for ever on connections its server never accepted).
BACKLOG = 16384
#: Open files of the bench and its children (servers, h2load): 10,000 connections need more
#: than the usual 1024 or 20,000 (serve asks for two per connection).
OPEN_FILES = 65536
#: Seconds a single GET of the bench's own client may take (a server that does not answer
#: one GET on a protocol has that protocol's cells marked failed, not run).
PREFLIGHT_TIMEOUT_S = 5
#: Seconds an h2load cell may run before it is killed (a failed cell).
H2LOAD_TIMEOUT_S = 60

NGINX_TLS_CONF = """
worker_processes 2;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
user root;
pid {tmp}/nginx-tls.pid;
error_log {tmp}/nginx-tls-error.log warn;
events {{ worker_connections 16384; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 60s;
    keepalive_requests 10000;
    access_log {tmp}/nginx-tls-access.log combined buffer=64k flush=1s;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2 reuseport backlog={backlog};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        root {root};
    }}
}}
"""

H2O_CONF = """
num-threads: 2
max-connections: 20000
user: root
pid-file: {tmp}/h2o.pid
error-log: {tmp}/h2o-error.log
access-log: {tmp}/h2o-access.log
http1-request-timeout: 60
http2-idle-timeout: 60
listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.2
    ocsp-update-interval: 0
hosts:
  "localhost":
    paths:
      "/":
        file.dir: {root}
"""


@dataclass(frozen=True)
class TlsServer:
    """A server under test: its command line, its HTTPS port, its configuration text and the
    protocols it is measured over (`PROTOCOLS` keys)."""

    name: str
    argv: list[str]
    port: int
    config: str = ""
    protocols: tuple[str, ...] = tuple(PROTOCOLS)


def write_files(root: Path) -> None:
    """The TLS cells' files in `root` (kept when already there: the plaintext half's files)."""
    pattern = bytes(i % 251 for i in range(251))
    for name, size in TLS_FILES.items():
        path = root / name
        if not path.exists() or path.stat().st_size != size:
            path.write_bytes((pattern * (size // len(pattern) + 1))[:size])


def tls_servers(
    binary: Path,
    tmp: Path,
    root: Path,
    cert_key: tuple[Path, Path],
    ports: list[int],
    serve_extra: list[str],
    floor: Path | None = None,
) -> list[TlsServer]:
    """nginx, h2o and `shortfirst-user` (serve with `serve_extra`, e.g. the user scheduler's
    arguments) on `ports` (nginx, h2o, serve's HTTPS and its plaintext listener; a fifth
    for the floor), then the HTTP/2 floor if its binary `floor` is given."""
    cert, key = cert_key
    fmt = {"tmp": tmp, "root": root, "cert": cert, "key": key, "backlog": BACKLOG}
    nginx_conf = NGINX_TLS_CONF.format(port=ports[0], **fmt)
    h2o_conf = H2O_CONF.format(port=ports[1], **fmt)
    (tmp / "nginx-tls.conf").write_text(nginx_conf)
    (tmp / "h2o.conf").write_text(h2o_conf)
    serve = [str(binary), "serve", "--root", str(root), "--listen", f"127.0.0.1:{ports[3]}"]
    serve += ["--tls-listen", f"127.0.0.1:{ports[2]}", "--tls-cert", str(cert), "--tls-key", str(key)]
    # serve refuses to start above what its open-files limit allows (two per connection).
    max_conns = max(64, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 256) // 2)
    serve += ["--threads", "2", "--max-connections", str(min(20_000, max_conns))]
    serve += ["--max-requests-per-connection", "10000"]
    serve += ["--backlog", str(BACKLOG)]
    serve += ["--access-log", str(tmp / "shortfirst-tls-access.log"), *serve_extra]
    return [
        TlsServer(
            "nginx", ["nginx", "-c", str(tmp / "nginx-tls.conf"), "-p", str(tmp)], ports[0], nginx_conf
        ),
        TlsServer("h2o", ["h2o", "-c", str(tmp / "h2o.conf")], ports[1], h2o_conf),
        TlsServer(OURS, serve, ports[2]),
    ] + ([floor_server(floor, root, cert_key, ports[4])] if floor else [])


def floor_server(binary: Path, root: Path, cert_key: tuple[Path, Path], port: int) -> TlsServer:
    """The HTTP/2 floor on `port`, serving `root`'s files from memory with serve's threads."""
    cert, key = cert_key
    argv = [str(binary), "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key)]
    argv += ["--root", str(root), "--threads", "2", "--backlog", str(BACKLOG)]
    return TlsServer(FLOOR, argv, port, protocols=("h2",))


def private_loopback(backlog: int = BACKLOG) -> None:
    """Moves this process (and the children it starts from now on) into a new network
    namespace with only loopback, up, whose accept and SYN queues hold `backlog`
    connections (`net.core.somaxconn` and `net.ipv4.tcp_max_syn_backlog` are per namespace:
    the machine's own are left alone). Needs root; a failure is a KitError."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))  # 10,000 connections each side
    except (ValueError, OSError):  # no CAP_SYS_RESOURCE: the hard limit it is
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise KitError(f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())} (root needed)")
    out = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise KitError(f"ip link set lo up: {out.stderr.strip()}")
    for name in ("net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog"):
        Path("/proc/sys", name).write_text(str(backlog))


def tree_pids(pid: int) -> list[int]:
    """`pid` and every descendant (through every thread's children), from /proc."""
    out, todo = [], [pid]
    while todo and len(out) < 4096:  # a server tree is a few processes; bound a runaway one
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of `pid`'s process tree."""
    return sum(process_cpu_s(p) for p in tree_pids(pid))


def tree_rss_bytes(pid: int) -> int:
    """Resident bytes of `pid`'s process tree (shared pages counted in each process)."""
    return sum(process_rss_bytes(p) for p in tree_pids(pid))


def client_context(alpn: str) -> ssl.SSLContext:
    """A client TLS context for the bench's own self-signed certificate, offering `alpn`."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    return ctx


def h2_get_frames(path: str) -> bytes:
    """An HTTP/2 client's first bytes: the preface, empty SETTINGS, and one GET of `path` on
    stream 1 (HPACK: indexed :method GET, :scheme https, literal :path, :authority)."""
    block = b"\x82\x87" + b"\x04" + bytes([len(path)]) + path.encode()
    block += b"\x01" + bytes([len("localhost")]) + b"localhost"
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    headers = len(block).to_bytes(3, "big") + b"\x01\x05" + (1).to_bytes(4, "big") + block
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings + headers


def _read_exactly(sock: ssl.SSLSocket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise KitError("the server closed an idle-memory connection before answering")
        buf += chunk
    return buf


def open_idle(port: int, alpn: str, path: str, size_bytes: int) -> ssl.SSLSocket:
    """A TLS connection to 127.0.0.1:`port` (ALPN `alpn`: `http/1.1` or `h2`) that finished
    its handshake and one GET of `path` (`size_bytes` long), left open."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=PREFLIGHT_TIMEOUT_S)
    sock = client_context(alpn).wrap_socket(raw, server_hostname="localhost")
    if alpn == "h2":
        sock.sendall(h2_get_frames(path))
        while True:  # frames until stream 1's END_STREAM (DATA or HEADERS)
            head = _read_exactly(sock, 9)
            length, kind, flags, stream = int.from_bytes(head[:3], "big"), head[3], head[4], head[5:]
            _read_exactly(sock, length)
            if kind == 4 and not flags & 1:  # the server's SETTINGS: acknowledged
                sock.sendall(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
            if kind in (0, 1) and flags & 1 and int.from_bytes(stream, "big") == 1:
                return sock
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < size_bytes:
        chunk = sock.recv(65536)
        if not chunk:
            raise KitError("the server closed an idle-memory connection before answering")
        buf += chunk
    return sock


def still_open(sock: ssl.SSLSocket) -> bool:
    """Whether the server has not closed `sock`: nothing to read, or bytes to read (a peek
    at the raw socket). Never waits: with a timeout set, a plain recv would first wait up to
    it for something to read, the whole timeout on every idle connection."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return True
    try:
        data = socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return bool(data)


def idle_rss(pid: int, port: int, alpn: str, connections: int) -> dict[str, Any]:
    """The server's resident memory with `connections` idle TLS connections open: bytes per
    connection (the tree's RSS after, less before, over the connections still open)."""
    open_idle(port, alpn, "/1k.bin", 1024).close()  # first-use allocations out of the delta
    time.sleep(0.5)
    before = tree_rss_bytes(pid)
    socks = []
    try:
        for _ in range(connections):
            socks.append(open_idle(port, alpn, "/1k.bin", 1024))
        time.sleep(1.0)
        after = tree_rss_bytes(pid)
        alive = sum(still_open(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    return {
        "alpn": alpn,
        "connections": connections,
        "connections_open_at_measure": alive,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        # None when no connection stayed open: nothing to divide by.
        "bytes_per_connection": round((after - before) / alive) if alive else None,
    }


def run_h2load(argv: list[str], cpu_s: Callable[[], float], timeout_s: float) -> dict[str, Any]:
    """h2load `argv` (a fixed number of requests, one thread), reading `cpu_s()` before it
    starts and after it ends: its parsed report with `server_cpu_s` over the run (connection
    set-up included). A KitError if it fails or runs past `timeout_s`."""
    cpu_start = cpu_s()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(timeout_s, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        for line in proc.stdout:
            if len(lines) < MAX_H2LOAD_LINES and not line.startswith("progress:"):
                lines.append(line)
        rc = proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cpu_end = cpu_s()
    text = "".join(lines)
    if rc == -9:
        raise KitError(f"killed after {timeout_s} s without an end: {text[-600:]}")
    if rc != 0:
        raise KitError(f"exited with {rc}: {text[-600:]}")
    result = parse_h2load(text)
    result["server_cpu_s"] = round(cpu_end - cpu_start, 3)
    return result


def cell_failure(result: dict[str, Any]) -> str | None:
    """Why a parsed h2load cell does not count (None: it does)."""
    req = result["requests"]
    bad = req["failed"] + req["errored"]
    if bad > FAILED_SHARE_MAX * max(1, req["started"]):
        return f"{req['failed']} failed and {req['errored']} errored of {req['started']} started requests"
    if result["bytes"]["total"] == 0:
        return "no bytes received"
    return None


@dataclass(frozen=True)
class TlsSettings:
    """How many requests and connections each cell runs."""

    #: Requests per cell at each file (h2load `-n`), times `scale`; at least one per
    #: connection. About 2-4 s per cell on loopback with one CPU.
    requests: tuple[tuple[str, int], ...] = (("1k.bin", 60_000), ("100k.bin", 20_000), ("10m.bin", 192))
    scale: float = 1.0
    connections: tuple[int, ...] = (64, 10_000)
    #: HTTP/2 streams h2load keeps open per connection (`-m`); HTTP/1.1 cells use 1.
    h2_streams: int = 8
    idle_connections: int = 1000

    def requests_for(self, path: str, connections: int) -> int:
        return max(connections, round(dict(self.requests)[path] * self.scale))


def h2load_argv(port: int, proto: str, path: str, connections: int, settings: TlsSettings) -> list[str]:
    """One cell's h2load command line: a fixed number of requests over `connections`."""
    streams = settings.h2_streams if proto == "h2" else 1
    n = settings.requests_for(path.lstrip("/"), connections)
    argv = ["h2load", "-t1", f"-c{connections}", f"-m{streams}", f"-n{n}", *PROTOCOLS[proto]]
    return [*argv, f"https://127.0.0.1:{port}{path}"]


def measure_cell(pid: int, port: int, cell: tuple[str, str, int], settings: TlsSettings) -> list[dict]:
    """One cell (protocol, file, connections) against the server `pid` on `port`: the
    attempts, the last one counting; a failed attempt is retried at half the connections."""
    proto, path, connections = cell
    attempts = []
    budget = round(dict(settings.requests)[path] * settings.scale)
    if connections > budget:
        why = f"not run: {connections} connections of one {path} each exceed the cell's {budget} requests"
        attempts.append({"protocol": proto, "file": path, "connections": connections, "failure": why})
        attempts[-1] |= {"connections_asked": connections, "server_cpu_s_per_gb": None}
        connections = budget
    while True:
        argv = h2load_argv(port, proto, f"/{path}", connections, settings)
        try:
            result = run_h2load(argv, lambda: tree_cpu_s(pid), H2LOAD_TIMEOUT_S)
            failure = cell_failure(result)
        except KitError as e:
            result, failure = {}, " ".join(str(e).split())[-800:]
        gb = result.get("bytes", {}).get("total", 0) / 1e9
        result |= {
            "protocol": proto,
            "file": path,
            "size_bytes": TLS_FILES[path],
            "connections": connections,
            "connections_asked": cell[2],
            "h2load": argv,
            "server_cpu_s_per_gb": round(result["server_cpu_s"] / gb, 3) if gb and not failure else None,
            "failure": failure,
        }
        attempts.append(result)
        if failure is None or connections // 2 < MIN_RETRY_CONNECTIONS:
            return attempts
        connections //= 2


def server_cells(
    server: TlsServer, pid: int, settings: TlsSettings, say: Callable[[str], None], broken: dict[str, str]
) -> list[dict]:
    """Every cell against one started server, in a fixed order; a protocol in `broken` (ALPN
    name → why) is not run, each of its cells recorded as failed."""
    runs = []
    for proto in server.protocols:
        alpn = ALPN[proto]
        for path in TLS_FILES:
            for connections in settings.connections:
                if alpn in broken:
                    cell = {"protocol": proto, "file": path, "connections": connections}
                    cell |= {"connections_asked": connections, "server_cpu_s_per_gb": None}
                    runs.append(cell | {"server": server.name, "failure": f"not run: {broken[alpn]}"})
                    continue
                for r in measure_cell(pid, server.port, (proto, path, connections), settings):
                    r["server"] = server.name
                    runs.append(r)
                    say(
                        f"tls {server.name:15s} {proto} {path:8s} c={r['connections']:<6d} "
                        + (
                            f"FAILED: {r['failure']}"
                            if r["failure"]
                            else f"{r['requests_per_s']:>9.0f} req/s {r['bytes_per_s'] / 1e6:>8.1f} MB/s "
                            f"cpu {r['server_cpu_s_per_gb']} s/GB"
                        )
                    )
    return runs


def preflight(port: int, protocols: tuple[str, ...] = tuple(PROTOCOLS)) -> dict[str, str]:
    """One GET of /1k.bin per protocol of `protocols` (by ALPN): the protocols that failed
    and why (a server that answers a head but no body, say)."""
    broken = {}
    for alpn in (ALPN[p] for p in protocols):
        try:
            open_idle(port, alpn, "/1k.bin", 1024).close()
        except (OSError, KitError) as e:
            broken[alpn] = (
                f"one GET of /1k.bin over TLS ({alpn}) got no full answer in {PREFLIGHT_TIMEOUT_S} s: {e}"
            )
    return broken


def wait_https(port: int, child: Any, timeout_s: float = 10.0) -> None:
    """Until a TLS handshake with `port` completes; a KitError if `child` exits first or
    nothing answers in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise KitError(f"{child.proc.args[0]} exited with {child.proc.returncode} before answering")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=PREFLIGHT_TIMEOUT_S) as raw:
                client_context("h2").wrap_socket(raw, server_hostname="localhost").close()
            return
        except OSError:
            time.sleep(0.1)
    raise KitError(f"https://127.0.0.1:{port}/1k.bin not answering after {timeout_s} s")


def run_servers(
    servers: list[TlsServer], tmp: Path, settings: TlsSettings, say: Callable[[str], None], rounds: int = 1
) -> tuple[list[dict], dict[str, list[dict]]]:
    """`rounds` rounds (at most `MAX_ROUNDS`), the servers' order reversed every other one;
    in each, each server started fresh: in the first round its idle memory per connection
    (HTTP/1.1 and HTTP/2), then its cells, each run marked with its round. Returns the runs
    and the idle figures per server."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise KitError(f"TLS rounds: {rounds}, not in 1..={MAX_ROUNDS}")
    runs, idle = [], {}
    for r in range(rounds):
        for server in servers if r % 2 == 0 else servers[::-1]:
            with Child(server.argv, tmp / f"{server.name}-tls-{r + 1}.out", start_new_session=True) as child:
                wait_https(server.port, child)
                broken = preflight(server.port, server.protocols)
                if r == 0:
                    idle[server.name] = _idle_memory(server, child.pid, settings, say, broken)
                cells = server_cells(server, child.pid, settings, say, broken)
                runs += [run | {"round": r + 1} for run in cells]
    return runs, idle


def _idle_memory(
    server: TlsServer, pid: int, settings: TlsSettings, say: Callable[[str], None], broken: dict[str, str]
) -> list[dict]:
    """The server's memory per idle connection over each of its protocols that works."""
    out: list[dict] = [{"alpn": a, "failure": why} for a, why in broken.items()]
    for alpn in (ALPN[p] for p in server.protocols):
        if alpn in broken:
            say(f"tls {server.name:15s} {alpn}: FAILED preflight: {broken[alpn]}")
            continue
        m = idle_rss(pid, server.port, alpn, settings.idle_connections)
        out.append(m)
        per = m["bytes_per_connection"] or "-"
        say(
            f"tls {server.name:15s} idle {alpn:8s} {per:>8} bytes/connection "
            f"({m['connections_open_at_measure']} of {m['connections']} open)"
        )
    return out


def summarize(runs: list[dict], ours: str = OURS) -> dict[str, Any]:
    """Per cell (`protocol/file/connections asked for`): each server's counted figures — the
    median over rounds of each round's last attempt that did not fail — with every failed
    attempt and the per-round requests/s, and `ours` against the better peer (requests/s,
    bytes/s) and against nginx (CPU per GB), with the targets: requests/s ≥ 1.0× at 1 KB
    and 100 KB, transfer ≥ 0.9× at 10 MB, CPU per GB ≤ 1.2× nginx's; and `ours` and the
    better peer against the floor where it ran (no target)."""
    cells: dict[str, dict[str, list[dict]]] = {}
    for r in runs:
        key = f"{r['protocol']}/{r['file']}/{r['connections_asked']}"
        cells.setdefault(key, {}).setdefault(r["server"], []).append(r)
    summary = {}
    for key, per in cells.items():
        row = {}
        for name, attempts in per.items():
            by_round: dict[int, dict] = {}
            for a in attempts:  # in order: a round's last attempt is the one that counts
                by_round[a.get("round", 1)] = a
            counted = [a for a in by_round.values() if not a["failure"]]
            row[name] = {
                "connections": attempts[-1]["connections"],
                "requests_per_s": _median([a.get("requests_per_s") for a in counted]),
                "bytes_per_s": _median([a.get("bytes_per_s") for a in counted]),
                "server_cpu_s_per_gb": _median([a["server_cpu_s_per_gb"] for a in counted]),
                "requests_per_s_per_round": [a.get("requests_per_s") for a in counted],
                "failures": [
                    {"connections": a["connections"], "why": a["failure"]} for a in attempts if a["failure"]
                ],
            }
        summary[key] = row | _ratios(row, ours, key.split("/")[1])
    return summary


def _ratios(row: dict, ours: str, path: str) -> dict[str, Any]:
    """`ours` over the better peer and over nginx, and whether the targets are met."""
    peers = [n for n in row if n not in (ours, FLOOR) and row[n]["bytes_per_s"] is not None]
    if ours not in row or row[ours]["bytes_per_s"] is None or not peers:
        return {}
    best_rps = max(row[n]["requests_per_s"] for n in peers)
    best_bps = max(row[n]["bytes_per_s"] for n in peers)
    out: dict[str, Any] = {
        "ratio_requests_per_s_vs_best_peer": _ratio(row[ours]["requests_per_s"], best_rps),
        "ratio_bytes_per_s_vs_best_peer": _ratio(row[ours]["bytes_per_s"], best_bps),
    }
    floor_rps = row.get(FLOOR, {}).get("requests_per_s")
    if floor_rps:
        out["ratio_requests_per_s_vs_floor"] = _ratio(row[ours]["requests_per_s"], floor_rps)
        out["ratio_best_peer_requests_per_s_vs_floor"] = _ratio(best_rps, floor_rps)
    nginx_cpu = row.get("nginx", {}).get("server_cpu_s_per_gb")
    if nginx_cpu and row[ours]["server_cpu_s_per_gb"] is not None:
        out["ratio_server_cpu_per_gb_vs_nginx"] = round(row[ours]["server_cpu_s_per_gb"] / nginx_cpu, 3)
    if path == "10m.bin":
        out["target_transfer_met"] = (out["ratio_bytes_per_s_vs_best_peer"] or 0) >= 0.9
    else:
        out["target_requests_met"] = (out["ratio_requests_per_s_vs_best_peer"] or 0) >= 1.0
    if "ratio_server_cpu_per_gb_vs_nginx" in out:
        out["target_cpu_met"] = out["ratio_server_cpu_per_gb_vs_nginx"] <= 1.2
    return out


def _median(values: list[float | None]) -> float | None:
    """The median of the values given (None when there are none)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None
