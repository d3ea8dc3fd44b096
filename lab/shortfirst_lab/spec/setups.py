"""Setups: named variants of an experiment's environment, one more dimension of its matrix.

The overload paper compares FAIR and SRPT under one workload in ten environments (its
Table 2, setups A-J: WAN delay, loss, persistent connections, RTO, SYN cookies, user
aborts, packet length, ...). An experiment file lists them as tables under `[setups]`,
each overriding keys of the sections that describe the environment::

    [setups.A]
    description = "baseline"

    [setups.B]
    description = "baseline + 100 ms RTT"
    wan.paths = [{rtt_ms = 100}]

    [setups.I]
    description = "baseline + 536-byte packets"
    uplink.mtu = 576

A setup's sections are merged key by key over the file's own (`uplink`, `client`, `server`,
`wan`; a key given replaces the file's value, lists included), and the result is validated
as a whole experiment, so every key keeps its checks; an error names
`setups.<NAME>.<section>.<key>`. The workload, the run timing, the calibration and the
experiment's matrix keys are shared by every setup: runs of different setups replay the same
trace for the same time and compare. Runs are named `...-setup<NAME>-rep<k>`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .experiment import Experiment, ExperimentError, experiment_from_dict

#: Sections a setup may override.
SETUP_SECTIONS = ("uplink", "client", "server", "wan")
#: Most setups of an experiment.
MAX_SETUPS = 26
_SETUP_NAME_RE = re.compile(r"^[A-Za-z0-9]{1,16}$")


@dataclass(frozen=True)
class Setup:
    name: str
    description: str
    overrides: dict[str, Any]  # {section: {key: value}} as written
    experiment: Experiment


def parse_setups(doc: dict[str, Any], path: Path) -> tuple[Setup, ...]:
    """The `[setups.*]` tables of a parsed experiment file, each validated in full."""
    raw = doc["setups"]
    if not isinstance(raw, dict) or not raw:
        raise ExperimentError(path, "setups", "tables [setups.NAME] (at least one)", raw)
    if len(raw) > MAX_SETUPS:
        raise ExperimentError(path, "setups", f"at most {MAX_SETUPS} setups", len(raw))
    base = {k: v for k, v in doc.items() if k != "setups"}
    out = []
    for name, table in raw.items():
        where = f"setups.{name}"
        if not _SETUP_NAME_RE.match(name):
            raise ExperimentError(path, where, "a setup name of 1 to 16 letters or digits", name)
        if not isinstance(table, dict):
            raise ExperimentError(path, where, "a table", table)
        description = table.get("description", "")
        if not isinstance(description, str):
            raise ExperimentError(path, f"{where}.description", "a string", description)
        overrides = {k: v for k, v in table.items() if k != "description"}
        merged = copy.deepcopy(base)
        for section, keys in overrides.items():
            if section not in SETUP_SECTIONS:
                raise ExperimentError(
                    path,
                    f"{where}.{section}",
                    f"one of the sections {list(SETUP_SECTIONS)} (a setup varies these)",
                )
            if not isinstance(keys, dict):
                raise ExperimentError(path, f"{where}.{section}", "a table of keys", keys)
            target = merged.setdefault(section, {})
            if not isinstance(target, dict):
                raise ExperimentError(path, section, "a table", target)
            target.update(copy.deepcopy(keys))
        try:
            exp = experiment_from_dict(merged, path)
        except ExperimentError as e:
            raise ExperimentError(path, f"{where}.{e.key}" if e.key else where, e.expected, e.got) from None
        out.append(Setup(name=name, description=description, overrides=overrides, experiment=exp))
    return tuple(out)
