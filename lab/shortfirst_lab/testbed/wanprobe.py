"""Small probes run inside namespaces to measure a WAN path from outside the
emulator (independent physics: kernel TCP and UDP, wall-clock time).

``python -m shortfirst_lab probe COMMAND ...``; each client-side command
prints one JSON object on stdout.

- ``accept-loop PORT``: accept and close connections forever (RTT probes).
- ``connect-times HOST PORT SRC N PARALLEL GAP_S``: N TCP connects from
  source address SRC, PARALLEL at a time, each worker pausing GAP_S after
  each; connect() returns after SYN -> SYN-ACK, i.e. one round trip. Prints
  ``{"rtt_ms": [...], "kernel_rtt_ms": [...]}``: the wall-clock connect time
  (includes this process's wake-up) and the kernel's own SYN -> SYN-ACK
  sample (``tcpi_rtt`` right after connect, taken in softirq on arrival).
- ``bulk-server PORT CC``: per connection, read the seconds wanted, then send
  zeros that long with congestion control CC (``TCP_CONGESTION``).
- ``bulk-client HOST PORT SRC SECONDS SKIP``: receive for SECONDS, print
  goodput after the first SKIP seconds and the MSS.
- ``udp-count PORT IDLE_S``: count datagrams until IDLE_S without one after
  the first (prints ``{"received": n}``); prints ``ready`` on stderr first.
- ``udp-send HOST PORT SRC N PPS``: send N numbered datagrams at PPS.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

#: Per-socket receive buffer for the UDP counter, so the receiver never drops.
UDP_RCVBUF_BYTES = 8 << 20
#: struct tcp_info: 8 bytes of u8 fields, then u32s; tcpi_rtt (µs) is the 16th.
TCPI_RTT_OFFSET = 8 + 15 * 4
TCP_INFO_BYTES = 104
#: SO_RCVBUFFORCE (root may exceed net.core.rmem_max); Python's socket module lacks the name.
SO_RCVBUFFORCE = 33


def accept_loop(port: int) -> None:
    srv = socket.create_server(("0.0.0.0", port), backlog=4096, reuse_port=True)
    while True:
        conn, _ = srv.accept()
        conn.close()


def connect_times(host: str, port: int, src: str, n: int, parallel: int, gap_s: float) -> dict:
    results: list[float] = []
    kernel: list[float] = []
    lock = threading.Lock()
    per = [n // parallel + (1 if i < n % parallel else 0) for i in range(parallel)]

    def worker(k: int) -> None:
        for _ in range(k):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((src, 0))
            t0 = time.perf_counter()
            s.connect((host, port))
            dt = time.perf_counter() - t0
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
            s.close()
            with lock:
                results.append(dt * 1e3)
                kernel.append(int.from_bytes(info[TCPI_RTT_OFFSET : TCPI_RTT_OFFSET + 4], "little") / 1e3)
            time.sleep(gap_s)

    threads = [threading.Thread(target=worker, args=(k,)) for k in per]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"rtt_ms": results, "kernel_rtt_ms": kernel}


def bulk_server(port: int, cc: str) -> None:
    srv = socket.create_server(("0.0.0.0", port), backlog=64, reuse_port=True)
    srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    chunk = bytes(256 * 1024)

    def serve(conn: socket.socket) -> None:
        with conn:
            seconds = float(conn.recv(64).decode())
            end = time.monotonic() + seconds
            try:
                while time.monotonic() < end:
                    conn.sendall(chunk)
            except OSError:
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def bulk_client(host: str, port: int, src: str, seconds: float, skip: float) -> dict:
    s = socket.socket()
    s.bind((src, 0))
    s.connect((host, port))
    s.sendall(f"{seconds}".encode())
    mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    t0 = time.monotonic()
    counted, started = 0, None
    while True:
        data = s.recv(1 << 20)
        if not data:
            break
        now = time.monotonic()
        if now - t0 >= skip:
            if started is None:
                started = now
            else:
                counted += len(data)
    end = time.monotonic()
    s.close()
    elapsed = end - started if started else 0.0
    return {
        "mss_bytes": mss,
        "goodput_bits_per_s": counted * 8 / elapsed if elapsed > 0 else 0.0,
        "seconds": elapsed,
    }


def udp_count(port: int, idle_s: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, UDP_RCVBUF_BYTES)
    s.bind(("0.0.0.0", port))
    print("ready", file=sys.stderr, flush=True)
    n = 0
    s.settimeout(60.0)  # the first datagram
    try:
        while True:
            s.recv(2048)
            n += 1
            s.settimeout(idle_s)
    except TimeoutError:
        pass
    return {"received": n}


def udp_send(host: str, port: int, src: str, n: int, pps: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / pps
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        s.sendto(i.to_bytes(8, "big") + bytes(56), (host, port))
    return {"sent": n}


#: The commands `main` runs (`python -m shortfirst_lab probe COMMAND` sends these here).
COMMANDS = ("accept-loop", "connect-times", "bulk-server", "bulk-client", "udp-count", "udp-send")


def main(argv: list[str]) -> int:
    cmd, *a = argv
    if cmd == "accept-loop":
        accept_loop(int(a[0]))
    elif cmd == "connect-times":
        print(json.dumps(connect_times(a[0], int(a[1]), a[2], int(a[3]), int(a[4]), float(a[5]))))
    elif cmd == "bulk-server":
        bulk_server(int(a[0]), a[1])
    elif cmd == "bulk-client":
        print(json.dumps(bulk_client(a[0], int(a[1]), a[2], float(a[3]), float(a[4]))))
    elif cmd == "udp-count":
        print(json.dumps(udp_count(int(a[0]), float(a[1]))), flush=True)
    elif cmd == "udp-send":
        print(json.dumps(udp_send(a[0], int(a[1]), a[2], int(a[3]), float(a[4]))))
    else:
        print(f"unknown command {cmd!r}", file=sys.stderr)
        return 2
    return 0
