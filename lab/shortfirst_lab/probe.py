"""Small network probes run inside testbed namespaces (``python -m shortfirst_lab.probe``).

``probe sink PORT``
    Accepts TCP connections on PORT and reads them to EOF; prints ``ready``
    once listening. Runs until killed (the testbed stops it).
``probe send HOST PORT SO_PRIORITY BYTES [--go]``
    Connects with the given ``SO_PRIORITY`` (so the packets land in that HTB
    class), sends BYTES, waits for the peer to close, prints the seconds taken.
    With ``--go`` it prints ``connected`` and waits for a line on stdin before
    sending, so a caller can take measurements right before the flow starts.
``probe fetch URL [URL …]``
    Fetches every URL concurrently (HTTP/1.1 GET, one connection each) and
    prints one JSON line per URL: url, status, bytes, seconds from connect to
    last byte. Used instead of curl so every fetch is timed the same way, from
    the client side, with no extra dependency.
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


def fetch_one(url: str) -> dict:
    parts = urlsplit(url)
    start = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=FETCH_TIMEOUT_S) as s:
        path = parts.path or "/"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = bytearray()
        while chunk := s.recv(65536):
            data += chunk
    seconds = time.monotonic() - start
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
    return {"url": url, "status": status, "bytes": len(body), "seconds": seconds}


def fetch(urls: list[str]) -> None:
    results: list[dict | None] = [None] * len(urls)

    def run(i: int, url: str) -> None:
        try:
            results[i] = fetch_one(url)
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
    elif mode == "fetch":
        fetch(argv[1:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
