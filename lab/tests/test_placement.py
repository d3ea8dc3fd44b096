"""CPU placement of a run's server and generator: the command-line lists are checked against
the CPUs this process may use, and the testbed starts each side's processes on its own CPUs.

The testbed half needs root (network namespaces): skipped with a message otherwise.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.testbed import placement as pl
from shortfirst_lab.testbed.bed import Testbed, new_run_id

REPO = Path(__file__).resolve().parents[2]
ALLOWED = sorted(os.sched_getaffinity(0))
FIRST, LAST = ALLOWED[0], ALLOWED[-1]


@pytest.mark.parametrize(
    ("server", "generator", "want"),
    [
        (None, None, pl.Placement()),
        (str(FIRST), None, pl.Placement(frozenset({FIRST}), None)),
        (None, str(LAST), pl.Placement(None, frozenset({LAST}))),
        (f"{FIRST}-{LAST}", str(FIRST), pl.Placement(frozenset(ALLOWED), frozenset({FIRST}))),
    ],
)
def test_lists_parse_into_a_placement(server, generator, want):
    assert pl.Placement.parse(server, generator) == want


@pytest.mark.parametrize(
    ("server", "generator", "error"),
    [
        ("x", None, "--server-cpus: CPU list 'x'"),
        (None, "3-1", "--generator-cpus: CPU list '3-1': bad range"),
        ("", None, "--server-cpus '': no CPU given"),
        (None, "4095", "--generator-cpus '4095': CPU 4095 is not available to this process"),
    ],
)
def test_bad_lists_are_named(server, generator, error):
    with pytest.raises(pl.PlacementError, match=error.replace("(", r"\(").replace("[", r"\[")):
        pl.Placement.parse(server, generator)


def test_provenance_and_testbed_arguments_carry_only_what_is_set():
    p = pl.Placement(frozenset({FIRST}), None)
    assert p.to_dict() == {"server_cpus": str(FIRST), "generator_cpus": None}
    assert p.testbed_args() == {"server_cpus": frozenset({FIRST})}
    assert pl.Placement().testbed_args() == {}


def allowed_list(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list for pid {pid}")


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces (CI runs as root)")
def test_testbed_starts_each_side_on_its_cpus():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    with Testbed(
        new_run_id(),
        10_000_000,
        shortfirst_bin=BIN,
        server_cpus=frozenset({LAST}),
        client_cpus=frozenset({FIRST}),
    ) as bed:
        srv = bed.server_popen(["sleep", "30"], stdout=subprocess.DEVNULL)
        cli = bed.client_popen(["sleep", "30"], stdout=subprocess.DEVNULL)
        try:
            # `ip netns exec` execs the command: the pid is the sleeper's own.
            assert allowed_list(srv.pid) == str(LAST)
            assert allowed_list(cli.pid) == str(FIRST)
        finally:
            srv.kill()
            cli.kill()
            srv.wait()
            cli.wait()


def test_a_cpu_outside_the_process_is_refused_before_anything_is_built():
    with pytest.raises(ValueError, match="server_cpus"):
        Testbed(new_run_id(), 10_000_000, server_cpus=frozenset({4095}))
