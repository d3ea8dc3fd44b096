"""The farm kind: a static serving experiment run on C hosts behind HAProxy.

A farm file is a static serving file (every section and key of `experiment.py`, read by the
same `expcheck`) plus one section that marks the kind::

    [farm]
    hosts = 2                         # int in [2, kit.FARM_MAX_HOSTS]: server namespaces, each running
                                      # `shortfirst serve` behind its own uplink of uplink.rate
                                      # (the HTB band tree, or a token bucket for a user-space
                                      # arm), all serving the same docroot
    dispatch = ["roundrobin", "leastconn", "sita-e"]
                                      # non-empty, no duplicates: the HAProxy configurations
                                      # `shortfirst farm map` writes -- roundrobin, leastconn
                                      # (blind to size) and sita-e (the size-interval map, its
                                      # cutoffs from the workload's trace); one more dimension
                                      # of the matrix: each dispatch crossed with each arm
    haproxy = "haproxy"               # the HAProxy binary (a name on PATH or a path)

In a farm the load is per host: `experiment.loads` are the bits requested ÷ (hosts ×
uplink.rate). Client groups (`[[client.groups]]` with `[wan]`, as in a static file) put the
clients behind the WAN emulator, each group its own path to the front (`testbed.farmbed`);
the hosts' uplinks stay the bottlenecks. Loads above 1, load schedules, setups and WAN path
sweeps (`wan.paths`) belong to other experiments and are refused here, as is what the farm's
runner does not apply rather than ignore: [calibration] (a farm's slowdown is ÷ the size at
one host's rate), `experiment.baselines` (its comparisons are fixed: SITA-E + SRPT against
leastconn), `uplink.rto_min_ms` and `uplink.initial_rto_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import FARM_MAX_HOSTS
from .expcheck import experiment_from_dict, refuse_unrun
from .expmodel import Experiment, RunSpec
from .schema import Field, SpecError, check_table

#: `farm.dispatch`: the configurations `shortfirst farm map` writes (`STEM.<name>.cfg`; sita-e's
#: file is `STEM.sita.cfg`), and the simulator's rule for each (`shortfirst sim --dispatch`;
#: sita-e is given the map's own cutoffs).
DISPATCHES = {"roundrobin": "round-robin", "leastconn": "least-connections", "sita-e": "sita"}

FIELDS = {
    "hosts": Field("int", required=True, lo=2, hi=FARM_MAX_HOSTS),
    "dispatch": Field("strs", required=True, choices=tuple(DISPATCHES)),
    "haproxy": Field("str"),
}


@dataclass(frozen=True)
class FarmRun:
    """One run of a farm's matrix: an arm of the static matrix under a dispatch rule."""

    spec: RunSpec
    dispatch: str

    @property
    def run_id(self) -> str:
        """`<dispatch>-<arm>-load<ρ>-rep<k>`: `sita-e-srpt-user-load0.80-rep1`."""
        return f"{self.dispatch}-{self.spec.run_id}"

    @property
    def arm_label(self) -> str:
        """The dispatch and the arm, as the summary names them: `sita-e+srpt/user`."""
        return f"{self.dispatch}+{self.spec.arm.label}"


@dataclass(frozen=True)
class FarmExperiment:
    """A validated farm file: the static experiment of its other sections, and the farm."""

    exp: Experiment
    hosts: int
    dispatch: tuple[str, ...]
    haproxy: str = "haproxy"

    @property
    def name(self) -> str:
        return self.exp.name

    def matrix(self) -> list[FarmRun]:
        """Runs in execution order: the static matrix's point (load, repeat) first, then each
        dispatch, then each arm, so every arm of a point runs back to back."""
        return [FarmRun(spec, d) for spec in self.exp.matrix() for d in self.dispatch]

    def to_dict(self) -> dict[str, Any]:
        return self.exp.to_dict() | {
            "farm": {"hosts": self.hosts, "dispatch": list(self.dispatch), "haproxy": self.haproxy}
        }


def from_dict(doc: dict[str, Any], path: Path, text: str = "") -> FarmExperiment:
    """Validates a farm document: `[farm]` here, the rest by the static kind's reader."""
    table = doc.get("farm")
    check_table(path, "farm", table, FIELDS)
    assert isinstance(table, dict)
    dispatch = tuple(table["dispatch"])
    if len(set(dispatch)) != len(dispatch):
        raise SpecError(path, "farm.dispatch", "no duplicates", list(dispatch))
    if "calibration" in doc:
        raise SpecError(path, "calibration", "no [calibration] in a farm (slowdown: ÷ size at a host's rate)")
    exp = experiment_from_dict({k: v for k, v in doc.items() if k != "farm"}, path, text)
    _check_fits_a_farm(path, exp)
    return FarmExperiment(exp, table["hosts"], dispatch, table.get("haproxy", "haproxy"))


def _check_fits_a_farm(path: Path, exp: Experiment) -> None:
    """What a farm does not run: overload (loads above 1, schedules, setups), WAN path sweeps."""
    if max(exp.loads) > 1:
        raise SpecError(path, "experiment.loads", "loads per host in (0, 1] in a farm", list(exp.loads))
    refuse_unrun(
        path,
        exp,
        "farm",
        (
            ("experiment.baselines", bool(exp.baselines)),
            ("uplink.rto_min_ms", bool(exp.uplink.rto_min_ms)),
            ("uplink.initial_rto_ms", bool(exp.uplink.initial_rto_ms)),
        ),
        groups_run=True,
    )
