"""The shared helper kit (shortfirst_lab.kit): its parsers and the load generator's command
line as tables, and the helpers that touch the machine on real sockets and files."""

import json
import math
import os
import socket
import subprocess
import sys

import pytest

from shortfirst_lab import kit

PROC_STAT = """\
cpu  10 1 5 100 2 3 4 7 0 0
cpu0 6 1 3 50 1 2 2 5 0 0
cpu1 4 0 2 50 1 1 2 2 0 0
intr 12345 0 0
ctxt 999
cpu2 1 2 3 4
btime 1700000000
"""


def test_proc_stat_cpu_lines():
    s = kit.parse_proc_stat(PROC_STAT)
    assert sorted(s) == ["cpu", "cpu0", "cpu1", "cpu2"]
    assert s["cpu"] == dict(zip(kit.PROC_STAT_FIELDS, [10, 1, 5, 100, 2, 3, 4, 7, 0, 0], strict=True))
    assert s["cpu0"]["steal"] == 5 and s["cpu1"]["idle"] == 50
    # An older kernel's short line: missing fields read 0.
    assert s["cpu2"] == {
        **dict.fromkeys(kit.PROC_STAT_FIELDS, 0),
        "user": 1,
        "nice": 2,
        "system": 3,
        "idle": 4,
    }
    assert sorted(kit.per_cpu_ticks(s)) == [0, 1, 2]


def test_proc_stat_of_this_machine():
    s = kit.read_proc_stat()
    assert "cpu" in s and len(kit.per_cpu_ticks(s)) >= 1
    assert s["cpu"]["idle"] > 0


NETSTAT = """\
TcpExt: SyncookiesSent ListenOverflows ListenDrops
TcpExt: 0 12 13
IpExt: InNoRoutes InOctets
IpExt: 5 123456789012
Tcp: RtoAlgorithm MaxConn
Tcp: 1 -1
Broken: a b
Other: 1 2
Weird: a b
Weird: 1 x
"""


@pytest.mark.parametrize(
    ("group", "key", "value"),
    [
        ("TcpExt", "ListenOverflows", 12),
        ("TcpExt", "ListenDrops", 13),
        ("IpExt", "InOctets", 123456789012),
        ("Tcp", "MaxConn", -1),
        ("Weird", "a", 1),
    ],
)
def test_netstat_pairs(group, key, value):
    assert kit.parse_proc_pairs(NETSTAT)[group][key] == value


def test_netstat_skips_mismatched_pairs_and_non_integers():
    p = kit.parse_proc_pairs(NETSTAT)
    assert "Broken" not in p and "Other" not in p
    assert "b" not in p["Weird"]


def test_netstat_of_this_machine():
    assert "TcpExt" in kit.read_netstat()


@pytest.mark.parametrize(
    ("line", "name", "labels", "value"),
    [
        ("gatekeeper_queue_length 3", "gatekeeper_queue_length", {}, 3.0),
        ('a_total{type="GET /x"} 7', "a_total", {"type": "GET /x"}, 7.0),
        ('a{type="GET /x",outcome="ok"} 1.5e-3', "a", {"type": "GET /x", "outcome": "ok"}, 1.5e-3),
        ('a{ type = "sp ace" , b="2" , } 1', "a", {"type": "sp ace", "b": "2"}, 1.0),
        (r'a{p="say \"hi\" \\ \n"} 2', "a", {"p": 'say "hi" \\ \n'}, 2.0),
        ('h_bucket{le="+Inf"} +Inf', "h_bucket", {"le": "+Inf"}, math.inf),
        ("g -Inf", "g", {}, -math.inf),
        ("g 4 1700000000000", "g", {}, 4.0),
        ("  g{} 5  ", "g", {}, 5.0),
        ("ns:rule_name 6", "ns:rule_name", {}, 6.0),
    ],
)
def test_prometheus_samples(line, name, labels, value):
    (s,) = kit.parse_prometheus(line)
    assert (s.name, s.labels, s.value) == (name, labels, value)


def test_prometheus_nan_comments_and_keys():
    text = '# HELP a help\n# TYPE a gauge\n\na{x="1"} NaN\nb 2\n'
    samples = kit.parse_prometheus(text)
    assert [s.name for s in samples] == ["a", "b"] and math.isnan(samples[0].value)
    assert kit.prometheus_series(text).keys() == {'a{x="1"}', "b"}


@pytest.mark.parametrize("line", ["a{x=1} 2", 'a{x="1" 2', "a two", '{x="1"} 2', 'a{x="1"}'])
def test_prometheus_bad_lines_are_named(line):
    with pytest.raises(kit.KitError, match="line 2"):
        kit.parse_prometheus("ok 1\n" + line)


def test_free_port_and_wait_port():
    port = kit.free_port()
    with pytest.raises(kit.KitError, match=f"nothing listening on 127.0.0.1:{port}"):
        kit.wait_port(port, timeout_s=0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        kit.wait_port(port, timeout_s=5)


def test_free_ports_are_below_the_ephemeral_range_and_never_repeat():
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = [kit.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(p < low for p in ports)


def test_wait_port_fails_at_once_when_the_child_exits():
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait()
    with pytest.raises(kit.KitError, match="exited with 3"):
        kit.wait_port(kit.free_port(), child, timeout_s=30)


def test_child_is_stopped_on_exit(tmp_path):
    with kit.Child(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], tmp_path / "c.log"
    ) as c:
        pid = c.pid
    assert c.proc.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_write_json_is_atomic_and_refuses_nan_unless_asked(tmp_path):
    p = tmp_path / "d" / "r.json"
    kit.write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    with pytest.raises(ValueError):
        kit.write_json(p, {"a": math.nan})
    assert json.loads(p.read_text()) == {"a": 1}  # the old file is intact
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temp file left
    kit.write_json(p, {"a": math.nan}, allow_nan=True)
    assert "NaN" in p.read_text()


def test_provenance_and_machine():
    prov = kit.provenance(argv=["x", "y z"])
    assert prov["command_line"] == "x 'y z'" and prov["cpu_count"] == os.cpu_count()
    # Run from a checkout: the commit is known (a tag may prefix it, -dirty may follow it).
    assert kit.git_commit() != "unknown"
    assert kit.git(["rev-parse", "HEAD"]) in kit.git_commit() or "-g" in kit.git_commit()
    m = kit.machine()
    assert m["cpus"] == os.cpu_count() and len(m["loadavg"]) == 3


def test_process_cpu_s():
    assert kit.process_cpu_s(os.getpid()) > 0
    assert kit.process_cpu_s(2**22 + 1) == 0.0
