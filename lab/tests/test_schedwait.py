"""The scheduler's waits of a point's processes (`kit.sched_snapshot`, `kit.sched_delta`,
`kit.child_pids`, `runners/gatekeeper/pg/schedwait.py`) and the slice a proxy runs with
(`cpus slice`)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from shortfirst_lab import kit
from shortfirst_lab.runners.gatekeeper.pg.schedwait import SchedWindow
from shortfirst_lab.testbed.cpus import CpusError, set_slice


def _fake_task(proc, pid, tid, run_ns, wait_ns, slices, ppid=1):
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    task.joinpath("schedstat").write_text(f"{run_ns} {wait_ns} {slices}\n")
    proc.joinpath(str(pid), "stat").write_text(f"{pid} (x) S {ppid} 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")


def test_a_snapshot_has_every_thread_of_the_processes_asked_for(tmp_path):
    _fake_task(tmp_path, 10, 10, 100, 20, 3)
    _fake_task(tmp_path, 10, 11, 50, 5, 1)
    _fake_task(tmp_path, 12, 12, 999, 999, 9)
    snap = kit.sched_snapshot([10, 99], tmp_path)  # 99 is gone
    assert snap == {10: (100, 20, 3), 11: (50, 5, 1)}


def test_a_delta_counts_only_threads_seen_at_both_ends():
    before = {1: (100, 10, 1), 2: (0, 0, 0)}
    after = {1: (1_100, 2_010, 5), 3: (9, 9, 9)}  # 2 ended, 3 started
    d = kit.sched_delta(before, after)
    assert d["threads"] == 1 and d["slices"] == 4
    assert d["run_s"] == pytest.approx(1e-6) and d["wait_s"] == pytest.approx(2e-6)
    assert d["wait_us_per_slice"] == pytest.approx(0.5)
    assert kit.sched_delta({}, {})["wait_us_per_slice"] is None


def test_children_are_the_processes_whose_parent_is_asked_for(tmp_path):
    _fake_task(tmp_path, 10, 10, 0, 0, 0)
    _fake_task(tmp_path, 11, 11, 0, 0, 0, ppid=10)
    _fake_task(tmp_path, 12, 12, 0, 0, 0, ppid=11)
    assert kit.child_pids(10, tmp_path) == [11]


def test_a_window_measures_the_live_threads_between_its_ends():
    stop = threading.Event()

    def spin() -> None:  # hashing a large buffer releases the GIL: the window's thread runs
        block = b"x" * 1_000_000
        while not stop.is_set():
            hashlib.sha256(block).digest()

    busy = threading.Thread(target=spin)
    busy.start()
    try:
        now = time.time()
        with SchedWindow([os.getpid()], os.getppid(), now + 0.05, now + 0.3) as w:
            time.sleep(0.5)
    finally:
        stop.set()
        busy.join()
    r = w.result()
    assert r is not None and r["proxy"]["threads"] >= 2 and r["proxy"]["run_s"] > 0.05
    assert "database" in r  # this process is its parent's child


def test_a_window_cut_short_has_no_result():
    now = time.time()
    with SchedWindow([os.getpid()], None, now, now + 60) as w:
        pass
    assert w.result() is None


def test_a_slice_outside_the_kernels_bounds_is_refused():
    for us in (0, 99, 100_001):
        with pytest.raises(CpusError, match="outside"):
            set_slice(us)


def _slice_ns() -> int:
    attr = ctypes.create_string_buffer(56)
    assert ctypes.CDLL(None).syscall(315, 0, attr, 56, 0) == 0  # sched_getattr
    return struct.unpack("IIQiIQQQII", attr.raw)[5]


def test_a_command_runs_with_the_slice_given_and_its_threads_inherit_it():
    if os.uname().machine != "x86_64":
        pytest.skip("cpus slice knows sched_setattr's number on x86_64 only")
    code = (
        "import ctypes, struct, threading\n"
        "def ns():\n"
        "    a = ctypes.create_string_buffer(56)\n"
        "    ctypes.CDLL(None).syscall(315, 0, a, 56, 0)\n"
        "    return struct.unpack('IIQiIQQQII', a.raw)[5]\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(ns())); t.start(); t.join()\n"
        "print(ns(), out[0])\n"
    )
    argv = [sys.executable, "-m", "shortfirst_lab", "cpus", "slice", "300", "--", sys.executable, "-c", code]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0 and "needs Linux 6.12" in r.stderr:
        pytest.skip(f"this kernel has no custom slices: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["300000", "300000"]
    assert _slice_ns() != 300_000  # this process kept its own
