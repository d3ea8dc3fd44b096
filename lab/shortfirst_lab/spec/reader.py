"""The one reader of experiment files: every file under `lab/experiments/` is read here,
whatever its kind, and refused before anything runs if a key is unknown or misspelt.

Kinds, told apart by the section only that kind has:

    static     [experiment]      a static serving experiment: arms × loads on a shaped uplink
                                 (tocs, userspace, WAN, SRRT, overload, demo; `expcheck`)
    tpcw       [bookstore]       the gatekeeper in front of the TPC-W bookstore (`spec.tpcw`)
    foreign    [backend.NAME]    the gatekeeper in front of datasette, json-server (`spec.foreign`)
    synthetic  [synthetic]       the gatekeeper in front of the synthetic upstream (`spec.synthetic`)

`SECTION.KEY=VALUE` overrides (the command line's `--set`) apply to the document before it is
validated, the same way for every kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import to_toml
from . import foreign, synthetic, tpcw
from .expcheck import experiment_from_dict
from .expmodel import Experiment
from .schema import SpecError, apply_override, read_toml

#: Each kind: the section that marks it, what it is, and every section it may have.
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "static": (
        "experiment",
        "static serving",
        ("experiment", "uplink", "workload", "client", "server", "run", "calibration", "wan", "setups"),
    ),
    "tpcw": ("bookstore", "gatekeeper on the TPC-W bookstore", tuple(tpcw.SCHEMA)),
    "foreign": ("backend", "gatekeeper on foreign backends", foreign.SECTIONS),
    "synthetic": ("synthetic", "gatekeeper on the synthetic upstream", synthetic.SECTIONS),
}


@dataclass(frozen=True)
class Spec:
    """A validated experiment file: its kind and its value (an `Experiment`, the TPC-W
    configuration dict, the foreign bench's `Settings`, or the synthetic bench's options)."""

    path: Path
    kind: str
    value: Any


def kind_of(doc: dict[str, Any], path: Path) -> str:
    """The kind whose marker section the document has; without one, the kind sharing the most
    sections with it (its reader then names the misspelt section)."""
    marked = [k for k, (marker, _, _) in KINDS.items() if marker in doc]
    if len(marked) == 1:
        return marked[0]
    if len(marked) > 1:
        raise SpecError(path, "", f"the sections of one kind, not of {marked}")
    overlap = {k: len(set(doc) & set(sections)) for k, (_, _, sections) in KINDS.items()}
    best = max(overlap.values())
    if best and list(overlap.values()).count(best) == 1:
        return max(overlap, key=overlap.__getitem__)
    markers = ", ".join(f"[{m}] ({what})" for m, what, _ in KINDS.values())
    raise SpecError(path, "", f"an experiment file: one of the sections {markers}")


def read_spec(path: str | Path, overrides: list[str] | None = None, kind: str | None = None) -> Spec:
    """Read, override and validate an experiment file of any kind (or of `kind`, if given)."""
    path = Path(path)
    doc, text = read_toml(path)
    for ov in overrides or []:
        apply_override(doc, ov, path)
    if overrides:
        text = f"# {path} with overrides: {' '.join(overrides)}\n" + to_toml(doc)
    found = kind_of(doc, path)
    if kind is not None and found != kind:
        raise SpecError(path, "", f"a {KINDS[kind][1]} experiment file ([{KINDS[kind][0]}])", found)
    if found == "static":
        return Spec(path, found, experiment_from_dict(doc, path, text))
    if found == "tpcw":
        return Spec(path, found, tpcw.validate(doc, path))
    if found == "synthetic":
        return Spec(path, found, synthetic.from_dict(doc, path))
    return Spec(path, found, foreign.from_dict(doc, path))


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Read and validate a static serving experiment file (`read_spec` of kind static).

    `overrides` are `SECTION.KEY=VALUE` strings (VALUE in TOML syntax, e.g. `run.duration_s=60`
    or `experiment.loads=[0.8]`), applied before validation; the experiment's `source` is then
    the effective file, with the overrides noted in a header comment, so what is stored beside
    the results is exactly what ran."""
    return read_spec(path, overrides, kind="static").value
