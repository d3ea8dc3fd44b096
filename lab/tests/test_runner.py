"""The runner's flow (layout, health sampling, failure handling) against a fake testbed and binary.

The fake testbed runs processes directly on loopback and the fake `shortfirst` (tests/fakes)
speaks the same flags and writes the same files, so this needs neither root nor the Rust build.
The real thing is exercised by test_e2e.py.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from shortfirst_lab.runners import health
from shortfirst_lab.runners import stage as stagemod
from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import load_experiment

FAKE = Path(__file__).parent / "fakes" / "fake_shortfirst.py"


class FakeTestbed:
    created: list[str] = []
    torn_down: list[str] = []
    tcp: list[tuple[int, str | None]] = []  # (queue_packets, congestion_control) per testbed
    shapers: list[str] = []  # per testbed

    def __init__(self, run_id, rate_bits_per_s, data_bands=6, n_clients=1, shortfirst_bin="", mtu=1500,
                 accept_queue=512, queue_packets=10_000, congestion_control=None, shaper="htb"):  # fmt: skip
        self.run_id = run_id
        FakeTestbed.tcp.append((queue_packets, congestion_control))
        FakeTestbed.shapers.append(shaper)
        self.server_ns = f"sf{run_id}s"
        self.client_ns = [f"sf{run_id}c{i}" for i in range(n_clients)]
        self.server_addr = "127.0.0.1"
        self.client_addrs = ["127.0.0.1"] * n_clients
        self.server_dev = "fake0"

    def __enter__(self):
        FakeTestbed.created.append(self.run_id)
        return self

    def __exit__(self, *exc):
        FakeTestbed.torn_down.append(self.run_id)
        return False

    client_argvs: list[list[str]] = []

    def server_popen(self, argv, **kw):
        return subprocess.Popen(argv, **kw)

    def client_popen(self, argv, **kw):
        FakeTestbed.client_argvs.append(list(argv))
        return subprocess.Popen(argv, **kw)

    def server_run(self, argv, **kw):
        return subprocess.run(argv, check=False, **kw)

    client_run = server_run

    def uplink_stats(self):
        return {"dev": self.server_dev, "bands": [{"band": 0, "bytes": 0}]}

    def health_sample(self):
        return {
            "open_connections": 2,
            "netstat": {"ListenOverflows": 0, "ListenDrops": 0},
            "bands": [1, 2],
            "server_cpu_s": 0.5,
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    bin_path = tmp_path / "shortfirst"
    bin_path.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    bin_path.chmod(bin_path.stat().st_mode | stat.S_IEXEC)
    ids = iter(range(100))
    mod = types.SimpleNamespace(
        Testbed=FakeTestbed, cleanup_leftovers=lambda prefix="sf": [], new_run_id=lambda: f"{next(ids):06x}"
    )
    monkeypatch.setattr(runner.Runner, "_testbed_module", staticmethod(lambda: mod))
    monkeypatch.setattr(runner, "ADMIN_PORT", _free_port())
    FakeTestbed.created.clear()
    FakeTestbed.torn_down.clear()
    FakeTestbed.tcp.clear()
    FakeTestbed.client_argvs.clear()
    FakeTestbed.shapers.clear()
    (tmp_path / "stage").mkdir()
    monkeypatch.setenv("SHORTFIRST_LAB_STAGE", str(tmp_path / "stage"))
    exp_path = tmp_path / "fake.toml"
    exp_path.write_text(f"""
[experiment]
name = "fake"
policies = ["fair", "srpt"]
loads = [0.5]
seed = 1
[uplink]
rate = 1000000
queue_packets = 321
congestion_control = "reno"
[workload]
kind = "fake"
files = 20
requests = 60
[server]
port = {_free_port()}
[run]
duration_s = 1.5
warmup_s = 0.2
drain_timeout_s = 20
[client]
timeout_s = 10
[calibration]
sizes = 3
repeats = 2
""")
    return exp_path, bin_path


def test_runner_layout_and_report(fake_env, tmp_path):
    exp_path, bin_path = fake_env
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()
    for f in ("experiment.toml", "provenance.json", "summary.json", "report.html", "workload/trace.csv",
              "calibration/requests.csv", "calibration/run.json"):  # fmt: skip
        assert (out / f).exists(), f
    for run in ("fair-load0.50-rep1", "srpt-load0.50-rep1"):
        d = out / "runs" / run
        for f in ("requests.csv", "summary.json", "health.csv", "uplink.json", "server.log", "load.log",
                  "commands.txt", "run.json", "server_metrics.txt", "analysis.json",
                  "tcp_counters.json"):  # fmt: skip
            assert (d / f).exists(), f"{run}/{f}"
        rec = json.loads((d / "run.json").read_text())
        assert rec["status"] == "ok"
        assert rec["server_rc"] == 0  # stopped by SIGTERM, exited cleanly
        h = pd.read_csv(d / "health.csv")
        assert len(h) >= 1
        assert {"t_s", "open_connections", "listen_overflows", "listen_drops", "server_cpu_s"} <= set(
            h.columns
        )
        assert "shortfirst_open_connections" in (d / "server_metrics.txt").read_text()
        cmds = (d / "commands.txt").read_text()
        assert f"--policy {run.split('-')[0]}" in cmds and "--load 0.5" in cmds
    prov = json.loads((out / "provenance.json").read_text())
    assert {"git_commit", "kernel", "cpu_count", "date_utc", "command_line", "seed"} <= set(prov)
    assert [r["policy"] for r in summary["runs"]] == ["fair", "srpt"]
    # Loopback has no shaped link, so the calibration fit may fail; it must then say so in the page.
    if summary["runs"][0]["mean_slowdown"] is None:
        assert "calibration/requests.csv:" in (out / "report.html").read_text()
    assert len(summary["comparisons"]) == 1
    # One testbed per run plus calibration, each torn down.
    assert len(FakeTestbed.created) == 3 and FakeTestbed.torn_down == FakeTestbed.created
    # The experiment's band queue and congestion control reach every testbed (calibration too).
    assert FakeTestbed.tcp == [(321, "reno")] * 3


def test_runs_write_their_logs_in_the_stage_and_move_them(fake_env, tmp_path):
    exp_path, bin_path = fake_env
    out, stage = tmp_path / "out", tmp_path / "stage"
    runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()
    # The generator wrote into the stage (RAM), not into the experiment directory ...
    gen_outs = [a[a.index("--out") + 1] for a in FakeTestbed.client_argvs if "--trace" in a]
    assert len(gen_outs) == 3 and all(o.startswith(str(stage)) for o in gen_outs)  # calibration too
    # ... and everything ended in runs/<run>, the stage empty, the commands naming the final place.
    assert list(stage.iterdir()) == []
    for run in ("fair-load0.50-rep1", "srpt-load0.50-rep1"):
        d = out / "runs" / run
        cmds = (d / "commands.txt").read_text()
        assert f"--out {d}" in cmds and str(stage) not in cmds
        assert (d / "requests.csv").exists() and (d / "run.json").exists()
    assert (out / "calibration" / "requests.csv").exists()


@pytest.mark.parametrize(
    ("files", "expect"),
    [
        ({"commands.txt": "load --out STAGE --trace t"}, {"commands.txt": "load --out FINAL --trace t"}),
        ({"load.log": "done -> STAGE"}, {"load.log": "done -> FINAL"}),
        # Other files are moved untouched, sub-directories included.
        ({"requests.csv": "STAGE", "sim/trace.csv": "x"}, {"requests.csv": "STAGE", "sim/trace.csv": "x"}),
        ({}, {}),
    ],
)
def test_unstage_moves_and_rewrites_paths(tmp_path, files, expect):
    stage, final = tmp_path / "shortfirst-run-x", tmp_path / "runs" / "run"
    stage.mkdir()
    final.mkdir(parents=True)
    for name, text in files.items():
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_text(text.replace("STAGE", str(stage)))
    stagemod.unstage(stage, final)
    assert not stage.exists()
    got = {str(f.relative_to(final)): f.read_text() for f in final.rglob("*") if f.is_file()}
    assert got == {k: v.replace("STAGE", str(stage)).replace("FINAL", str(final)) for k, v in expect.items()}


def test_stage_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SHORTFIRST_LAB_STAGE", "")
    assert stagemod.stage_root() is None and stagemod.make_stage("r") is None
    monkeypatch.setenv("SHORTFIRST_LAB_STAGE", str(tmp_path / "missing"))
    with pytest.raises(stagemod.StageError, match="not a directory"):
        stagemod.make_stage("r")
    monkeypatch.setenv("SHORTFIRST_LAB_STAGE", str(tmp_path))
    st = stagemod.make_stage("fair-load0.50-rep1")
    assert st is not None and st.parent == tmp_path and st.name.startswith("shortfirst-fair-load0.50-rep1-")


def test_sigterm_unwinds_like_ctrl_c(tmp_path):
    """`python -m shortfirst_lab` turns SIGTERM into the KeyboardInterrupt path: `finally` blocks
    (the testbed's teardown) run and the exit status is 130."""
    marker = tmp_path / "cleaned"
    script = f"""
import sys, time
from pathlib import Path
from shortfirst_lab import __main__ as m
def cmd(_a):
    try:
        print("started", flush=True)
        time.sleep(30)
    finally:
        Path({str(marker)!r}).write_text("yes")
    return 0
m.SUBCOMMANDS["sleep"] = ("sleep", lambda p: None, cmd)
sys.exit(m.main(["sleep"]))
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "started"
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert marker.read_text() == "yes" and "interrupted" in err


def test_failed_run_is_recorded_and_matrix_continues(fake_env, tmp_path, monkeypatch):
    exp_path, bin_path = fake_env
    monkeypatch.setenv("FAKE_SERVE_FAIL", "srpt")
    monkeypatch.setattr(runner, "SERVER_START_TIMEOUT_S", 2.0)
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()
    rec = json.loads((out / "runs" / "srpt-load0.50-rep1" / "run.json").read_text())
    assert rec["status"].startswith("failed: server not reachable")
    assert "failing on purpose" in (out / "runs" / "srpt-load0.50-rep1" / "server.log").read_text()
    assert [r["policy"] for r in summary["runs"]] == ["fair"]
    assert FakeTestbed.torn_down == FakeTestbed.created
    # Resume re-runs only the failed run.
    monkeypatch.delenv("FAKE_SERVE_FAIL")
    FakeTestbed.created.clear()
    summary = runner.Runner(load_experiment(exp_path), out, bin_path, resume=True, progress=False).run()
    assert [r["policy"] for r in summary["runs"]] == ["fair", "srpt"]
    assert len(FakeTestbed.created) == 1


def test_refuses_to_overwrite_runs_without_resume(fake_env, tmp_path):
    exp_path, bin_path = fake_env
    out = tmp_path / "out"
    (out / "runs" / "x").mkdir(parents=True)
    with pytest.raises(runner.RunnerError, match="already holds runs"):
        runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()


_BASE = {"experiment": {"name": "x", "description": "B"}, "run": {"duration_s": 200}}


@pytest.mark.parametrize(
    ("stored", "given", "ok"),
    [
        (_BASE, _BASE, True),
        # Setups added (the description may say so): the kept runs were made the same way.
        (_BASE | {"setups": {"B": {"uplink": {"mtu": 576}}}},
         {"experiment": {"name": "x", "description": "B, F"}, "run": {"duration_s": 200},
          "setups": {"B": {"uplink": {"mtu": 576}}, "F": {"uplink": {"initial_rto_ms": 500}}}}, True),
        (_BASE, _BASE | {"setups": {"F": {"uplink": {"initial_rto_ms": 500}}}}, True),
        # A kept setup changed, one removed, or anything else changed: a fresh directory.
        (_BASE | {"setups": {"B": {"uplink": {"mtu": 576}}}},
         _BASE | {"setups": {"B": {"uplink": {"mtu": 1500}}}}, False),
        (_BASE | {"setups": {"B": {"uplink": {"mtu": 576}}}}, _BASE, False),
        (_BASE, {"experiment": {"name": "x", "description": "B"}, "run": {"duration_s": 600}}, False),
        (_BASE, {"experiment": {"name": "y", "description": "B"}, "run": {"duration_s": 200}}, False),
    ],
)  # fmt: skip
def test_resume_takes_an_experiment_that_only_adds_setups(stored, given, ok):
    assert runner.resumable(stored, given) is ok


def test_trace_too_short_for_duration(tmp_path):
    trace = tmp_path / "trace.csv"
    pd.DataFrame({"time_s": [0.0, 1.0], "path": ["/a", "/b"], "size_bytes": [1250, 1250]}).to_csv(
        trace, index=False
    )
    exp_path = tmp_path / "e.toml"
    exp_path.write_text("""
[experiment]
name = "x"
policies = ["fair"]
loads = [0.5]
[uplink]
rate = 10000
[workload]
kind = "k"
files = 1
requests = 2
[run]
duration_s = 10
""")
    # 20,000 bits at 0.5 × 10 kbit/s last 4 s < 10 s.
    with pytest.raises(runner.RunnerError, match=r"lasts only 4 s .* set workload.requests to at least 6"):
        runner.check_trace_covers(load_experiment(exp_path), trace)


def test_normalise_health_flattens_and_aliases():
    s = health.normalise_health(
        {"connections": {"established": 7}, "netstat": {"TcpExtListenOverflows": 3, "ListenDrops": 4},
         "bands": [{"bytes": 10}, {"bytes": 20}], "note": "text", "flag": True}
    )  # fmt: skip
    assert s["open_connections"] == 7
    assert s["listen_overflows"] == 3
    assert s["listen_drops"] == 4
    assert s["bands.1.bytes"] == 20
    assert "note" not in s and "flag" not in s


def test_calibration_trace_ladder(tmp_path):
    trace = tmp_path / "trace.csv"
    sizes = [41, 100, 1000, 5000, 20_000, 100_000, 2_000_000]
    pd.DataFrame({"time_s": range(7), "path": [f"/{s}" for s in sizes], "size_bytes": sizes}).to_csv(
        trace, index=False
    )
    exp_path = tmp_path / "e.toml"
    exp_path.write_text(
        '[experiment]\nname="x"\npolicies=["fair"]\nloads=[0.5]\n[workload]\nkind="k"\nfiles=1\nrequests=1\n'
        "[run]\nduration_s=1\n[calibration]\nsizes=4\nrepeats=3\n"
    )
    r = runner.Runner(load_experiment(exp_path), tmp_path, tmp_path / "bin", progress=False)
    length = r.calibration_trace(trace, tmp_path / "cal.csv")
    cal = pd.read_csv(tmp_path / "cal.csv")
    assert len(cal) == 12
    # Ladder 41, 1497, 54660, 2e6 (geometric); nearest sizes in log distance:
    assert sorted(set(cal["size_bytes"])) == [41, 1000, 100_000, 2_000_000]
    assert (cal.groupby("size_bytes").size() == 3).all()
    # Each fetch has at least 1.6× its serialisation time at 10 Mbit/s before the next one.
    gaps = cal["time_s"].diff().shift(-1).dropna().to_numpy()
    need = 1.6 * 8 * cal["size_bytes"].to_numpy()[:-1] / 10e6
    assert (gaps >= need).all()
    assert length > cal["time_s"].max()


def test_trace_for_load_prefix_fills_duration(tmp_path):
    trace = tmp_path / "trace.csv"
    # 100 requests of 1250 B = 10,000 bits each.
    pd.DataFrame({"time_s": range(100), "path": ["/a"] * 100, "size_bytes": [1250] * 100}).to_csv(
        trace, index=False
    )
    exp_path = tmp_path / "e.toml"
    exp_path.write_text(
        '[experiment]\nname="x"\npolicies=["fair"]\nloads=[0.5]\n[uplink]\nrate=100000\n'
        '[workload]\nkind="k"\nfiles=1\nrequests=100\n[run]\nduration_s=4\n'
    )
    r = runner.Runner(load_experiment(exp_path), tmp_path, tmp_path / "bin", progress=False)
    r.trace = trace
    p = r.trace_for_load(0.5)
    # 0.5 × 100 kbit/s × 4 s = 200,000 bits = 20 requests.
    assert p.name == "trace-load0.50.csv"
    assert len(pd.read_csv(p)) == 20
    assert r.trace_for_load(0.5) == p  # cached


def test_proc_pairs_and_counter_delta():
    text = (
        "Tcp: RtoAlgorithm RtoMin RetransSegs CurrEstab\nTcp: 1 200 10 5\n"
        "TcpExt: TCPTimeouts ListenDrops\nTcpExt: 3 0\n"
    )
    parsed = runner.parse_proc_pairs(text)
    assert parsed == {"Tcp": {"RtoAlgorithm": 1, "RtoMin": 200, "RetransSegs": 10, "CurrEstab": 5},
                      "TcpExt": {"TCPTimeouts": 3, "ListenDrops": 0}}  # fmt: skip
    before = {"Tcp.RetransSegs": 10, "Tcp.CurrEstab": 5, "TcpExt.TCPTimeouts": 3, "TcpExt.ListenDrops": 0}
    after = {"Tcp.RetransSegs": 17, "Tcp.CurrEstab": 9, "TcpExt.TCPTimeouts": 3, "TcpExt.ListenDrops": 2}
    assert health.counter_delta(before, after) == {"Tcp.RetransSegs": 7, "TcpExt.ListenDrops": 2}


def test_touch_docroot_reads_every_file_once(tmp_path, monkeypatch):
    root = tmp_path / "docroot"
    (root / "f").mkdir(parents=True)
    for i in range(3):
        (root / "f" / f"{i}.bin").write_bytes(b"x" * i)
    (root / "index.html").write_text("hi")
    assert stagemod.touch_docroot(root) == 4
    monkeypatch.setattr(stagemod, "MAX_TOUCH_FILES", 3)
    with pytest.raises(stagemod.StageError, match="more than 3 files"):
        stagemod.touch_docroot(root)


def test_touch_docroot_moves_access_times_past_modification(tmp_path):
    """What the read is for: afterwards relatime has no reason to write an access time."""
    f = tmp_path / "a.bin"
    f.write_bytes(b"abc")
    mtime = f.stat().st_mtime
    os.utime(f, (mtime - 100, mtime))  # as after creation: atime not after mtime
    stagemod.touch_docroot(tmp_path)
    if f.stat().st_atime <= mtime:
        pytest.skip(f"{tmp_path} is mounted noatime: access times are never written there")
    assert f.stat().st_atime > mtime
