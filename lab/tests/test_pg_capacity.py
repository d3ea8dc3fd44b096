"""The overload experiment's capacity from open-loop costs (`runners/gatekeeper/pg/capacity.py`):
the window a probe is costed over, and the database's CPU time without a reservation."""

from __future__ import annotations

import os

import pytest

from shortfirst_lab.kit import CLK_TCK
from shortfirst_lab.runners.gatekeeper.backends.base import GatekeeperError
from shortfirst_lab.runners.gatekeeper.pg.capacity import DbCpu, process_tree_cpu_s, window_cost


def test_a_probe_is_costed_over_the_samples_inside_its_schedule():
    # One CPU-second every two seconds; the schedule runs from 100 to 110 s.
    samples = [(100.0 + 0.5 * i, 0.25 * i) for i in range(25)]
    done = {"cheap": [101.0, 102.5, 104.0, 109.6, 109.9], "expensive": [103.0]}
    w = window_cost(samples, done, start_s=100.0, duration_s=10.0)
    # Inside [102, 109.75]: samples 102.0 .. 109.5.
    assert w["window_s"] == pytest.approx(7.5)
    assert w["cpu_s"] == pytest.approx(3.75)
    assert w["busy"] == pytest.approx(0.5)
    # Completions between the first and the last sample kept, the last one excluded.
    assert w["completed"] == {"cheap": 2, "expensive": 1}


def test_a_probe_too_short_to_sample_is_refused():
    with pytest.raises(GatekeeperError, match="fewer than two CPU samples"):
        window_cost([(100.0, 0.0), (110.0, 1.0)], {"cheap": []}, start_s=100.0, duration_s=10.0)


def _stat(pid: int, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime ...
    return f"{pid} (post gres) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0\n"


def test_the_database_cpu_counts_the_postmaster_its_children_and_the_reaped(tmp_path):
    procs = {
        10: _stat(10, 1, utime=5, stime=5, cutime=100, cstime=50),  # the postmaster
        11: _stat(11, 10, utime=30, stime=20),  # a backend
        12: _stat(12, 10, utime=1, stime=0),
        13: _stat(13, 11, utime=999, stime=999),  # not the postmaster's child
        14: _stat(14, 1, utime=999, stime=999),  # someone else
    }
    for pid, text in procs.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(text)
    (tmp_path / "self").mkdir()
    (tmp_path / "15").mkdir()  # gone between the listing and the read
    assert process_tree_cpu_s(10, tmp_path) == pytest.approx((10 + 150 + 50 + 1) / CLK_TCK)


def test_the_database_cpu_of_a_live_process_grows():
    cpu = DbCpu((), os.getpid())
    before = cpu.seconds()
    sum(i * i for i in range(2_000_000))
    assert cpu.seconds() > before
    assert "postmaster" in cpu.source


def test_the_database_cpu_needs_a_source():
    with pytest.raises(GatekeeperError, match="neither a reserved CPU nor a postmaster"):
        DbCpu((), None)
