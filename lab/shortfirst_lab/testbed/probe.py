"""Small network probes run inside testbed namespaces (``python -m shortfirst_lab probe``).

``probe sink PORT``
    Accepts TCP connections on PORT and reads them to EOF; prints ``ready``
    once listening. Runs until killed (the testbed stops it).
``probe send HOST PORT SO_PRIORITY BYTES [--go]``
    Connects with the given ``SO_PRIORITY`` (so the packets land in that HTB
    class), sends BYTES, waits for the peer to close, prints the seconds taken.
    With ``--go`` it prints ``connected`` and waits for a line on stdin before
    sending, so a caller can take measurements right before the flow starts.
``probe fetch [--src ADDR] URL [URL …]``
    Fetches every URL concurrently (HTTP/1.1 GET, one connection each) and
    prints one JSON line per URL: url, status, body bytes, seconds from the
    connect to the body's last byte (the papers' response time). ``--src``
    binds the connections to a source address (a client group's). Used instead
    of curl so every fetch is timed the same way, from the client side, with
    no extra dependency.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

#: A fetch that takes longer than this is a failure, not a slow success.
FETCH_TIMEOUT_S = 120.0


def sink(port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(64)
    print("ready", flush=True)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(host: str, port: int, so_priority: int, n_bytes: int, wait_for_go: bool = False) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, so_priority)
    s.connect((host, port))
    if wait_for_go:
        print("connected", flush=True)
        sys.stdin.readline()
    start = time.monotonic()
    chunk = b"x" * 65536
    left = n_bytes
    while left:
        left -= s.send(chunk[: min(left, len(chunk))])
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the sink closes after reading everything: all bytes delivered
    print(f"{time.monotonic() - start:.6f}", flush=True)


def fetch_one(url: str, src: str | None = None) -> dict:
    """GET ``url`` on a new connection; ``seconds`` runs from just before the
    connect (SYN) to the last byte of the body (by Content-Length), the
    paper's response time; the connection is then read to its end."""
    parts = urlsplit(url)
    start = time.monotonic()
    last_byte_s = None
    source = (src, 0) if src else None
    address = (parts.hostname, parts.port or 80)
    with socket.create_connection(address, timeout=FETCH_TIMEOUT_S, source_address=source) as s:
        path = parts.path or "/"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = bytearray()
        expected_total = None
        while chunk := s.recv(65536):
            data += chunk
            if expected_total is None and b"\r\n\r\n" in data:
                expected_total = _expected_total(bytes(data))
            if last_byte_s is None and expected_total is not None and len(data) >= expected_total:
                last_byte_s = time.monotonic() - start
    seconds = last_byte_s if last_byte_s is not None else time.monotonic() - start
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
    return {"url": url, "status": status, "bytes": len(body), "seconds": seconds}


def _expected_total(data: bytes) -> int | None:
    """Header length plus Content-Length, once the head is complete; None without one."""
    head, sep, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(head) + len(sep) + int(value.strip())
    return None


def fetch(urls: list[str], src: str | None = None) -> None:
    results: list[dict | None] = [None] * len(urls)

    def run(i: int, url: str) -> None:
        try:
            results[i] = fetch_one(url, src)
        except OSError as e:
            results[i] = {"url": url, "status": 0, "bytes": 0, "seconds": -1.0, "error": str(e)}

    threads = [threading.Thread(target=run, args=(i, u)) for i, u in enumerate(urls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        print(json.dumps(r), flush=True)


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "sink":
        sink(int(argv[1]))
    elif mode == "send":
        send(argv[1], int(argv[2]), int(argv[3], 0), int(argv[4]), wait_for_go=argv[5:] == ["--go"])
    elif mode == "fetch" and argv[1:2] == ["--src"]:
        fetch(argv[3:], src=argv[2])
    elif mode == "fetch":
        fetch(argv[1:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
