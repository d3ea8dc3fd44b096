"""The initial-RTO program (synrto.py): its instructions and inputs as tables (its effect in a
real namespace: test_namespace_overload.py)."""

from __future__ import annotations

import struct

import pytest

from shortfirst_lab.spec.experiment import ExperimentError, experiment_from_dict
from shortfirst_lab.testbed import synrto


@pytest.mark.parametrize(
    ("ms", "hz", "want"), [(500, 250, 125), (500, 1000, 500), (3000, 100, 300), (10, 100, 1)]
)
def test_jiffies_table(ms, hz, want):
    assert synrto.jiffies(ms, hz) == want


def test_the_program_answers_the_timeout_question_and_nothing_else():
    code = synrto.program(125)
    assert len(code) == 6 * 8
    ops = [struct.unpack_from("<BBhi", code, 8 * i) for i in range(6)]
    assert ops[0] == (0x61, 0x12, 0, 0), "r2 = op"
    assert ops[1] == (0x55, 0x02, 2, 1), "skip unless BPF_SOCK_OPS_TIMEOUT_INIT"
    assert ops[2][3] == 125 and ops[3] == (0x63, 0x31, 4, 0), "reply = T"
    assert ops[5][0] == 0x95
    for bad in (0, -1, 2**31):
        with pytest.raises(synrto.SynRtoError):
            synrto.program(bad)


def test_inputs_are_read_and_refused_clearly():
    assert synrto.kernel_hz("CONFIG_X=y\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n") == 250
    with pytest.raises(synrto.SynRtoError, match="CONFIG_HZ"):
        synrto.kernel_hz("CONFIG_X=y\n")
    mounts = "cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    assert str(synrto.cgroup2_root(mounts)) == "/sys/fs/cgroup/unified"
    assert synrto.cgroup2_root("proc /proc proc rw 0 0\n") is None
    for ms in (0, 5, 60_001):
        with pytest.raises(synrto.SynRtoError, match="initial RTO"):
            synrto.InitialRto(ms, hz=250)


@pytest.mark.parametrize(
    ("value", "ok"), [(0, True), (500, True), (5, False), (60_001, False), ("1s", False)]
)
def test_the_experiment_key_is_checked(value, ok):
    doc = {
        "experiment": {"name": "x", "policies": ["fair"], "loads": [0.5]},
        "workload": {"kind": "surge", "files": 10, "requests": 10},
        "run": {"duration_s": 10},
        "uplink": {"initial_rto_ms": value},
    }
    if ok:
        assert experiment_from_dict(doc).uplink.initial_rto_ms == value
    else:
        with pytest.raises(ExperimentError, match="initial_rto_ms"):
            experiment_from_dict(doc)
