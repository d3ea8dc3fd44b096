"""A stand-in for the `shortfirst` binary, for testing the runner's flow without root.

Implements just enough of `workload generate`, `serve` and `load` (same flags, same output
files) on loopback with the Python standard library. Timings are real but tiny.
"""

from __future__ import annotations

import argparse
import csv
import http.server
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.request
from functools import partial
from pathlib import Path


def workload(a: argparse.Namespace) -> int:
    rng = random.Random(a.seed)
    root = Path(a.out) / "docroot"
    root.mkdir(parents=True)
    sizes = [rng.choice([100, 500, 2000, 8000, 30000]) for _ in range(a.files)]
    for i, s in enumerate(sizes):
        (root / f"f{i}.bin").write_bytes(b"x" * s)
    t = 0.0
    with open(Path(a.out) / "trace.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "path", "size_bytes"])
        for _ in range(a.requests):
            i = rng.randrange(a.files)
            t += rng.expovariate(100.0)
            w.writerow([f"{t:.6f}", f"/f{i}.bin", sizes[i]])
    return 0


class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"shortfirst_open_connections 0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(a: argparse.Namespace) -> int:
    if os.environ.get("FAKE_SERVE_FAIL") == a.policy:
        print("fake serve: failing on purpose", file=sys.stderr)
        return 3
    host, port = a.listen.rsplit(":", 1)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=a.root)
    srv = http.server.ThreadingHTTPServer((host, int(port)), handler)
    ahost, aport = a.admin.rsplit(":", 1)
    adm = http.server.ThreadingHTTPServer((ahost, int(aport)), Metrics)
    threading.Thread(target=adm.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    srv.serve_forever()
    return 0


def load(a: argparse.Namespace) -> int:
    rows = list(csv.DictReader(open(a.trace)))
    times = [float(r["time_s"]) for r in rows]
    if a.load is not None:
        bits = sum(int(r["size_bytes"]) for r in rows) * 8
        scale = bits / (a.load * a.uplink) / (times[-1] or 1.0)
        times = [t * scale for t in times]
    out = Path(a.out)
    t0 = time.monotonic()
    recs = []
    for i, (r, t) in enumerate(zip(rows, times, strict=True)):
        if a.duration is not None and t >= a.duration:
            break
        time.sleep(max(0.0, t - (time.monotonic() - t0)))
        start = time.monotonic() - t0
        with urllib.request.urlopen(a.target + r["path"], timeout=5) as resp:
            body = resp.read()
            status = resp.status
        done = time.monotonic() - t0
        recs.append([i, 0, r["path"], r["size_bytes"], len(body), status, "ok", 1, f"{t:.6f}", f"{start:.6f}",
                     f"{start:.6f}", f"{done:.6f}", f"{done:.6f}"])  # fmt: skip
    with open(out / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow("id,client,path,size_bytes,bytes_received,status,outcome,attempts,scheduled_s,start_s,"
                   "connected_s,first_byte_s,done_s".split(","))  # fmt: skip
        w.writerows(recs)
    late = sorted(float(r[9]) - float(r[8]) for r in recs) or [0.0]
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))] * 1000
    summary = {"requests": len(recs), "lateness_p99_ms": p99, "valid": True, "offered_load": a.load}
    (out / "summary.json").write_text(json.dumps(summary))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workload")
    w.add_argument("action")
    for k in ("--kind", "--out"):
        w.add_argument(k, required=True)
    for k in ("--files", "--requests", "--seed"):
        w.add_argument(k, type=int, required=True)
    s = sub.add_parser("serve")
    for k in (
        "--root",
        "--listen",
        "--policy",
        "--admin",
        "--cutoffs",
        "--send-buffer-bytes",
        "--max-connections",
        "--scheduler",
        "--link-rate",
        "--write-concurrency",
        "--pacer-burst-bytes",
        "--pacer-rate-fraction",
    ):
        s.add_argument(k)
    s.add_argument("--at-max-connections", choices=("refuse", "wait"))
    ld = sub.add_parser("load")
    for k in ("--target", "--trace", "--out", "--model"):
        ld.add_argument(k)
    ld.add_argument("--load", type=float)
    ld.add_argument("--link-rate", "--uplink", dest="uplink", type=float)
    ld.add_argument("--duration", type=float)
    ld.add_argument("--speed", type=float)
    ld.add_argument("--seed", type=int)
    ld.add_argument("--clients", type=int)
    ld.add_argument("--timeout", type=float)
    ld.add_argument("--quiet", action="store_true")
    # Accepted, not acted on: the runner's tests check that they are passed.
    for k in ("--load-schedule", "--persistent", "--abort-after", "--retries"):
        ld.add_argument(k)
    sub.add_parser("--version")
    if sys.argv[1:] == ["--version"]:
        print("shortfirst fake")
        return 0
    a = p.parse_args()
    return {"workload": workload, "serve": serve, "load": load}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
