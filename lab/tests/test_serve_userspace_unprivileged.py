"""``shortfirst serve --scheduler user`` runs without CAP_NET_ADMIN and without
any qdisc: the user-space uplink scheduler needs neither.

As root (CI) the server runs in a fresh network namespace whose only device is
loopback (no qdisc: ``noqueue``), as user ``nobody`` with every capability
dropped (``setpriv``); elsewhere it runs as the invoking non-root user, who has
no capability to begin with. The control: kernel mode (``--scheduler kernel``,
SO_PRIORITY bands) refuses to start under the same restrictions.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab import kit

REPO = Path(__file__).resolve().parents[2]
#: CAP_NET_ADMIN's bit in /proc/<pid>/status capability masks.
CAP_NET_ADMIN_BIT = 12
NOBODY = 65534

#: A client run where the server is: GETs each URL, prints one JSON line per URL.
CLIENT = """
import hashlib, json, sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        body, status = e.read(), e.code
    except OSError as e:
        print(json.dumps({"url": url, "status": 0, "error": str(e)}))
        continue
    text = body.decode(errors="replace") if url.endswith("/metrics") else ""
    digest = hashlib.sha256(body).hexdigest()
    print(json.dumps({"url": url, "status": status, "len": len(body), "sha256": digest, "text": text}))
"""


def _cap_eff(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no CapEff in /proc/{pid}/status")


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])  # effective
    raise AssertionError(f"no Uid in /proc/{pid}/status")


class Place:
    """Where the server runs: a private namespace as nobody (root), or here as ourselves."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ns = None
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("setpriv (util-linux) is missing: cannot drop root's capabilities")
            self.ns = f"sfuser{os.getpid() % 100000}"
            subprocess.run(["ip", "netns", "add", self.ns], check=True)
            subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        elif _cap_eff(os.getpid()) & (1 << CAP_NET_ADMIN_BIT):
            pytest.skip("this non-root process holds CAP_NET_ADMIN: cannot test running without it")

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns] if self.ns else []

    def unprivileged(self) -> list[str]:
        """The command prefix that runs a server without privileges."""
        if not self.ns:
            return []
        drop = ["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
        return [*self.prefix(), "setpriv", *drop, "--inh-caps=-all", "--bounding-set=-all", "--"]

    def client(self, *urls: str) -> list[dict]:
        out = subprocess.run(
            [*self.prefix(), sys.executable, "-c", CLIENT, *urls], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    def qdiscs(self) -> list[str]:
        """Loopback's qdiscs (as root: the private namespace's only device)."""
        argv = [*self.prefix(), "tc", "-j", "qdisc", "show", "dev", "lo"]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            return []
        return [q["kind"] for q in json.loads(out.stdout or "[]")]

    def close(self) -> None:
        if self.ns:
            subprocess.run(["ip", "netns", "delete", self.ns], check=False)


@pytest.fixture()
def place(world_tmp):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    p = Place(world_tmp)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture()
def world_tmp():
    """A temporary directory nobody can reach (pytest's own tmp_path is private to its user)."""
    with tempfile.TemporaryDirectory(prefix="shortfirst-unprivileged-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


def _docroot(tmp: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A world-readable docroot and a world-executable copy of the binary (nobody must reach both)."""
    for d in (tmp, tmp / "root"):
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o755)
    rng = random.Random(7)
    files = {
        "small.bin": rng.randbytes(20_000),
        "large.bin": rng.randbytes(1_500_000),
        "index.html": b"<p>hi</p>\n",
    }
    for name, data in files.items():
        (tmp / "root" / name).write_bytes(data)
        os.chmod(tmp / "root" / name, 0o644)
    binary = tmp / "shortfirst"
    shutil.copy2(BIN, binary)
    os.chmod(binary, 0o755)
    return tmp / "root", binary, files


def _wait_ready(place: Place, proc: subprocess.Popen, url: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {proc.stderr.read()}")
        if place.client(url)[0]["status"] == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"server did not answer {url} within {timeout_s} s")


def test_user_scheduler_serves_without_cap_net_admin_or_qdisc(place, world_tmp):
    root, binary, files = _docroot(world_tmp)
    port, admin = kit.free_port(), kit.free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [str(binary), "serve", "--root", str(root), "--listen", f"127.0.0.1:{port}", "--admin"]
    argv += [f"127.0.0.1:{admin}", "--scheduler", "user", "--link-rate", "20mbit", "--policy", "srpt"]
    server = subprocess.Popen([*place.unprivileged(), *argv], stderr=subprocess.PIPE, text=True)
    try:
        _wait_ready(place, server, f"{base}/index.html")
        # The server process itself: no CAP_NET_ADMIN (as root: not even uid 0).
        assert not _cap_eff(server.pid) & (1 << CAP_NET_ADMIN_BIT)
        if place.ns:
            assert _uid(server.pid) == NOBODY and _cap_eff(server.pid) == 0
        assert set(place.qdiscs()) <= {"noqueue"}, place.qdiscs()
        results = place.client(*(f"{base}/{name}" for name in files), f"{base}/missing")
        for r, (name, data) in zip(results, files.items(), strict=False):
            assert r["status"] == 200 and r["sha256"] == hashlib.sha256(data).hexdigest(), (name, r)
        assert results[-1]["status"] == 404
        metrics = kit.prometheus_series(place.client(f"http://127.0.0.1:{admin}/metrics")[0]["text"])
        assert metrics["shortfirst_uplink_grants_total"] > 0, metrics
        assert metrics["shortfirst_uplink_registered"] == 0
        assert metrics["shortfirst_priority_changes_total"] == 0, "no SO_PRIORITY in user mode"
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert server.returncode == 0, server.stderr.read()


def test_kernel_mode_refuses_to_start_there(place, world_tmp):
    """The control: the same restrictions do stop the kernel mode, so the test above means something."""
    root, binary, _ = _docroot(world_tmp)
    port = kit.free_port()
    argv = [
        str(binary),
        "serve",
        "--root",
        str(root),
        "--listen",
        f"127.0.0.1:{port}",
        "--scheduler",
        "kernel",
    ]
    out = subprocess.run([*place.unprivileged(), *argv], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "CAP_NET_ADMIN" in out.stderr, out.stderr
