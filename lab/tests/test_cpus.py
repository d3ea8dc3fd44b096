"""CPU reservation with cpusets (shortfirst_lab.testbed.cpus): CPU lists and hierarchy detection as
tables, reserve/release against a fake cgroup tree, and, as root on a machine with a cpuset
hierarchy and two CPUs, the real kernel moving one process of ours (never the machine's)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shortfirst_lab.testbed import cpus
from shortfirst_lab.testbed.cpus import CpuReservation, CpusError, Hierarchy


@pytest.mark.parametrize(
    ("text", "want"),
    [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0-1,3,5-6\n", {0, 1, 3, 5, 6}), ("", set()), ("2,", {2})],
)
def test_cpu_lists(text, want):
    assert cpus.parse_cpulist(text) == want
    assert cpus.parse_cpulist(cpus.format_cpulist(want)) == want


@pytest.mark.parametrize(("cpu_set", "text"), [({0, 1, 2, 5}, "0-2,5"), ({3}, "3"), ({1, 3}, "1,3")])
def test_cpu_lists_are_written_with_ranges(cpu_set, text):
    assert cpus.format_cpulist(cpu_set) == text


@pytest.mark.parametrize("text", ["a", "1-", "3-1", "-1", "1-99999", "0-1-2"])
def test_bad_cpu_lists_are_refused(text):
    with pytest.raises(CpusError, match="CPU list"):
        cpus.parse_cpulist(text)


def fake_tree(root: Path, layout: str) -> Path:
    """A cgroup mount as the kernel lays it out, with plain files; returns the cpuset root."""
    if layout == "v1":
        base = root / "cpuset"
        base.mkdir(parents=True)
        (base / "cpuset.cpus").write_text("0-3\n")
        (base / "cpuset.effective_cpus").write_text("0-3\n")
        (base / "cpuset.effective_mems").write_text("0\n")
    else:
        base = root if layout == "v2" else root / "unified"
        base.mkdir(parents=True, exist_ok=True)
        (base / "cgroup.controllers").write_text("cpu io memory cpuset pids\n")
        (base / "cgroup.subtree_control").write_text("")
        (base / "cpuset.cpus.effective").write_text("0-3\n")
        (base / "cpuset.mems.effective").write_text("0\n")
    (base / "cgroup.procs").write_text("1\n2\n100\n200\n")
    return base


@pytest.mark.parametrize(("layout", "version"), [("v1", 1), ("v2", 2), ("hybrid-v2", 2)])
def test_detect(tmp_path, layout, version):
    base = fake_tree(tmp_path, layout)
    assert cpus.detect(tmp_path) == Hierarchy(version, base)


def test_detect_without_cpuset(tmp_path):
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    with pytest.raises(CpusError, match="no cpuset controller"):
        cpus.detect(tmp_path)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A v1 tree with a container runtime's cpuset; moving a pid takes it out of its group's
    cgroup.procs, and pid 2 (a per-CPU kernel thread) cannot be moved."""
    base = fake_tree(tmp_path / "cg", "v1")
    (base / "docker").mkdir()
    (base / "docker" / "cpuset.cpus").write_text("0-3\n")

    def move(self, pid, group):
        if pid == 2:
            return False
        for g in [self.h.base, *[d for d in self.h.base.iterdir() if d.is_dir()]]:
            procs = g / "cgroup.procs"
            if procs.exists():
                procs.write_text("".join(f"{p}\n" for p in cpus._pids(g) if p != pid))
        with open(group / "cgroup.procs", "a") as f:
            f.write(f"{pid}\n")
        return True

    monkeypatch.setattr(CpuReservation, "move", move)
    # A real cgroup directory is removed with its control files in it; a fake one is not.
    monkeypatch.setattr(
        CpuReservation, "_remove", staticmethod(lambda g: shutil.rmtree(g, ignore_errors=True))
    )
    return CpuReservation(cpus.detect(tmp_path / "cg"), "sf", tmp_path / "state.json")


def test_reserve_moves_every_other_process_and_release_undoes_it(fake):
    out = fake.reserve({3})
    assert (out["reserved_cpus"], out["rest_cpus"], out["moved"], out["not_movable"]) == ("3", "0-2", 3, 1)
    assert (fake.reserved / "cpuset.cpus").read_text() == "3"
    assert (fake.rest / "cpuset.cpus").read_text() == "0-2"
    assert cpus._pids(fake.rest) == [1, 100, 200] and cpus._pids(fake.h.base) == [2]
    assert (fake.h.base / "docker" / "cpuset.cpus").read_text() == "0-2"
    # Reserving the same CPUs again is allowed; other CPUs are not, until released.
    fake.reserve({3})
    with pytest.raises(CpusError, match="already reserves CPUs 3"):
        fake.reserve({2})
    back = fake.release()
    assert back == {"moved_back": 3, "restored": {"docker": "0-3"}}
    assert not fake.reserved.exists() and not fake.rest.exists() and not fake.state_file.exists()
    assert sorted(cpus._pids(fake.h.base)) == [1, 2, 100, 200]
    assert (fake.h.base / "docker" / "cpuset.cpus").read_text() == "0-3"


@pytest.mark.parametrize(
    ("want", "match"), [({4}, "subset of 0-3"), (set(), "non-empty"), ({0, 1, 2, 3}, "no CPU")]
)
def test_bad_reservations_are_refused_before_anything_changes(fake, want, match):
    with pytest.raises(CpusError, match=match):
        fake.reserve(want)
    assert not fake.reserved.exists() and cpus._pids(fake.h.base) == [1, 2, 100, 200]


def real_hierarchy() -> Hierarchy:
    if os.geteuid() != 0:
        pytest.skip("needs root: cpusets are created under /sys/fs/cgroup")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to reserve one")
    try:
        return cpus.detect()
    except CpusError as e:
        pytest.skip(f"no cpuset hierarchy on this machine: {e}")


@pytest.mark.root
def test_the_kernel_keeps_a_moved_process_on_the_reserved_cpu(tmp_path):
    # Only a process of ours is moved: the test must not take CPUs from the machine's others.
    res = CpuReservation(real_hierarchy(), f"sftest-{os.getpid()}", tmp_path / "state.json")
    online = res.online()
    cpu = max(online)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        res.create({cpu})
        assert res.move(sleeper.pid, res.reserved)
        assert os.sched_getaffinity(sleeper.pid) == {cpu}
        assert res.move(sleeper.pid, res.rest)
        assert os.sched_getaffinity(sleeper.pid) == online - {cpu}
        # `run` puts itself on the reserved CPU, then execs the command.
        code = "import os; print(sorted(os.sched_getaffinity(0)))"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "shortfirst_lab",
                "cpus",
                "--name",
                res.reserved.name[: -len("-reserved")],
                "run",
                "--",
                sys.executable,
                "-c",
                code,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"[{cpu}]"
        back = res.release()
        # Released, the process is back in the root cpuset, on every CPU.
        assert back["moved_back"] == 1 and os.sched_getaffinity(sleeper.pid) == online
        assert not res.reserved.exists() and not res.rest.exists()
    finally:
        if res.reserved.exists() or res.rest.exists():
            res.release()
        sleeper.kill()
        sleeper.wait()
