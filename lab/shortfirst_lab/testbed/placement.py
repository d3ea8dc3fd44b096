"""Where a run's processes go: the CPUs of the server and of the load generator.

On a machine with few CPUs the server, the generator and the kernel's packet processing of
both compete for one CPU unless placed apart; at 100 Mbit/s (1,000-2,000 requests/s) that
shows as generator lateness, not as a slower server, and makes every point invalid. Placement
is a property of the machine, not of the experiment, so it is given on the command line
(``shortfirst_lab run --server-cpus 1 --generator-cpus 0``) and recorded in provenance.json.
A CPU the lab process may not use (outside its cpuset or affinity) is an error before
anything is built; ``python -m shortfirst_lab cpus run`` confines a run to the reserved CPUs, so a
placement across CPUs is run without it, on an otherwise quiet machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..kit import LabError
from .cpus import CpusError, format_cpulist, parse_cpulist


class PlacementError(LabError, ValueError):
    """A CPU list that cannot be parsed or is not available to this process."""


@dataclass(frozen=True)
class Placement:
    """CPUs for the server's and the generator's processes; None inherits the lab's own."""

    server_cpus: frozenset[int] | None = None
    generator_cpus: frozenset[int] | None = None

    @classmethod
    def parse(cls, server: str | None, generator: str | None) -> Placement:
        return cls(_cpus("--server-cpus", server), _cpus("--generator-cpus", generator))

    def testbed_args(self) -> dict[str, frozenset[int]]:
        """Keyword arguments of `testbed.Testbed` (only those set)."""
        args = {"server_cpus": self.server_cpus, "client_cpus": self.generator_cpus}
        return {k: v for k, v in args.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        def fmt(c: frozenset[int] | None) -> str | None:
            return None if c is None else format_cpulist(set(c))

        return {"server_cpus": fmt(self.server_cpus), "generator_cpus": fmt(self.generator_cpus)}


def _cpus(flag: str, text: str | None) -> frozenset[int] | None:
    if text is None:
        return None
    try:
        cpus = parse_cpulist(text)
    except CpusError as e:
        raise PlacementError(f"{flag}: {e}") from None
    allowed = os.sched_getaffinity(0)
    if not cpus:
        raise PlacementError(f"{flag} {text!r}: no CPU given")
    if not cpus <= allowed:
        raise PlacementError(
            f"{flag} {text!r}: CPU {format_cpulist(cpus - allowed)} is not available to this process "
            f"(allowed: {format_cpulist(set(allowed))}; `python -m shortfirst_lab cpus run` confines it "
            "to the reserved CPUs)"
        )
    return frozenset(cpus)


def checked_cpus(what: str, cpus: frozenset[int] | None) -> frozenset[int] | None:
    """``cpus`` if this process may run on all of them (a cpuset reservation may forbid some);
    ValueError naming ``what`` otherwise. None passes (inherit)."""
    if cpus is None:
        return None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise ValueError(
            f"{what} {sorted(cpus)}: expected a non-empty subset of this process's CPUs {sorted(allowed)}"
        )
    return frozenset(cpus)
