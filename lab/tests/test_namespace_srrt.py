"""SRRT tells two clients apart that SRPT cannot: the same file requested at the same
moment from a near (20 ms) and a far (300 ms) client group, while far clients' long
downloads keep the 10 Mbit/s uplink backlogged.

WAN testbed (``shortfirst netem`` between the client groups and the server's HTB uplink),
reno in the server namespace. For each policy, a fresh ``shortfirst serve``: six 2.5 MB
downloads from the far group, then after 2 s one 400 KB fetch from each group at once.
The access log's ``band=`` is each response's starting band:

- ``srpt`` (the paper's cutoffs, as ``srrt.toml`` names them: under ``serve``'s default a
  400 KB response starts a band ahead of 2.5 MB ones): both 400 KB responses start in the
  same band (the top one, with the backlog);
- ``srrt``: the near one starts in a better band than the far one and the backlog, and
  finishes well before it, and at least twice as fast as under ``srpt``, where it shares
  the top band with the backlog.

Needs root and a built binary (``make build``; ``SHORTFIRST_BIN`` picks another); skipped
otherwise. About a minute.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.runners import downloads
from shortfirst_lab.testbed import bed as testbed

REPO = Path(__file__).resolve().parents[2]
PORT = 8080
SAME_BYTES = 400_000
BACKLOG_BYTES = 2_500_000
N_BACKLOG = 6
#: Seconds the backlog runs before the two fetches: the far flows' windows have grown and
#: the uplink's top band holds a queue.
BACKLOG_HEAD_START_S = 2.0
FETCH_TIMEOUT_S = 60.0

pytestmark = [
    *NEEDS_ROOT,
    pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built (make build, or set SHORTFIRST_BIN)"),
]

_LOG_LINE = re.compile(
    r'^(?P<remote>\S+) .*"GET (?P<path>\S+) HTTP/1\.1" (?P<status>\d+) .* band=(?P<band>\d+)'
)


def _probe(*args: str) -> list[str]:
    return [sys.executable, "-m", "shortfirst_lab", "probe", *args]


def _bands(log: Path, path: str) -> dict[str, int]:
    """Starting band of each response for ``path``, by the client's address."""
    out = {}
    for line in log.read_text().splitlines():
        m = _LOG_LINE.match(line)
        if m and m["path"] == path and m["status"] == "200":
            out[m["remote"]] = int(m["band"])
    return out


def _one_policy(tb: testbed.Testbed, root: Path, policy: str, tmp: Path) -> dict:
    near, far = tb.group_addrs["near"], tb.group_addrs["far"]
    base = f"http://{tb.server_addr}:{PORT}"
    log = tmp / f"access-{policy}.log"
    server = tb.server_popen(
        [tb.shortfirst_bin, "serve", "--root", root, "--policy", policy, "--access-log", log]
        + (["--cutoffs", downloads.CUTOFFS] if policy == "srpt" else [])
        + ["--listen", f"{tb.server_addr}:{PORT}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"serve-{policy}.log", "w"),  # noqa: SIM115 (closed with the process)
    )
    try:
        downloads._wait_for_server(tb, server, f"{base}/small.bin")
        backlog = tb.client_popen(
            _probe("fetch", "--src", far, *[f"{base}/big-{i}.bin" for i in range(N_BACKLOG)]),
            stdout=subprocess.DEVNULL,
        )
        time.sleep(BACKLOG_HEAD_START_S)
        same = f"{base}/same.bin"
        fetches = {
            name: tb.client_popen(_probe("fetch", "--src", addr, same), stdout=subprocess.PIPE, text=True)
            for name, addr in (("near", near), ("far", far))
        }
        results = {}
        for name, proc in fetches.items():
            out, _ = proc.communicate(timeout=FETCH_TIMEOUT_S)
            results[name] = json.loads(out.splitlines()[0])
            assert results[name]["status"] == 200 and results[name]["bytes"] == SAME_BYTES, results[name]
        overlapped = backlog.poll() is None
        backlog.wait(timeout=FETCH_TIMEOUT_S)  # to its end, so the log has the backlog's bands
    finally:
        server.terminate()
        server.wait(timeout=15)
    bands = _bands(log, "/same.bin")
    return {
        "near_s": results["near"]["seconds"],
        "far_s": results["far"]["seconds"],
        "near_band": bands[near],
        "far_band": bands[far],
        "backlog_bands": sorted(_bands(log, "/big-0.bin").values()),
        "overlapped": overlapped,
    }


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("srrt")
    root = tmp / "docroot"
    root.mkdir()
    (root / "small.bin").write_bytes(b"s" * 1_000)
    (root / "same.bin").write_bytes(b"m" * SAME_BYTES)
    for i in range(N_BACKLOG):
        (root / f"big-{i}.bin").write_bytes(b"b" * BACKLOG_BYTES)
    groups = [testbed.GroupPath("near", 20.0), testbed.GroupPath("far", 300.0)]
    with testbed.Testbed(
        testbed.new_run_id(), 10_000_000, shortfirst_bin=BIN, congestion_control="reno", groups=groups,
        netem_dir=tmp,
    ) as tb:  # fmt: skip
        out = {policy: _one_policy(tb, root, policy, tmp) for policy in ("srpt", "srrt")}
    print(json.dumps(out, indent=1))
    return out


def test_the_fetches_overlap_the_backlog(measured):
    for policy, m in measured.items():
        assert m["overlapped"], (policy, m)


def test_srpt_cannot_tell_near_from_far(measured):
    m = measured["srpt"]
    assert m["near_band"] == m["far_band"], m


def test_srrt_serves_the_near_client_first(measured):
    srrt, srpt = measured["srrt"], measured["srpt"]
    message = f"srpt {srpt}, srrt {srrt}"
    assert srrt["near_band"] < srrt["far_band"], message
    assert srrt["near_band"] < min(srrt["backlog_bands"]), message
    assert srrt["near_s"] < srrt["far_s"], message
    assert 2 * srrt["near_s"] < srpt["near_s"], message
