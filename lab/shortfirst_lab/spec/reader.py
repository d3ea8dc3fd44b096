"""The one reader of experiment files: every file under `lab/experiments/` is read here,
whatever its kind, and refused before anything runs if a key is unknown or misspelt.

Kinds, told apart by what only that kind has:

    static      [experiment]   a static serving experiment: arms × loads on a shaped uplink
                               (tocs, userspace, WAN, SRRT, overload, demo; `expcheck`)
    gatekeeper  backend = ...  the gatekeeper in front of a backend, with that backend's table:
                               "synthetic" [synthetic] (`spec.synthetic`), "bookstore"
                               [bookstore] (TPC-W, `spec.tpcw`), "datasette" [datasette] and
                               "json-server" [json-server] (`spec.foreign`)
    farm        [farm]         a static serving experiment on C hosts behind HAProxy: the static
                               kind's sections plus [farm] (`spec.farm`)
    browser     [browser]      headless Chromium's page loads over a static experiment's
                               background: the static kind's sections plus [browser]
                               (`spec.browser`)

`SECTION.KEY=VALUE` overrides (the command line's `--set`) apply to the document before it is
validated, the same way for every kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import to_toml
from . import browser, farm, foreign, pg, synthetic, tpcw
from .expcheck import experiment_from_dict
from .expmodel import Experiment
from .schema import GATEKEEPER_BACKENDS, SpecError, apply_override, read_toml

#: Each kind: the key that marks it, what it is, and every section it may have.
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "static": (
        "experiment",
        "static serving",
        ("experiment", "uplink", "workload", "client", "server", "run", "calibration", "wan", "setups"),
    ),
    "farm": (
        "farm",
        "farm",
        ("experiment", "uplink", "workload", "client", "server", "run", "farm"),
    ),
    "browser": (
        "browser",
        "browser",
        ("experiment", "uplink", "workload", "client", "server", "run", "browser"),
    ),
    "gatekeeper": (
        "backend",
        "gatekeeper",
        tuple(dict.fromkeys([*GATEKEEPER_BACKENDS, *tpcw.SCHEMA, *synthetic.SECTIONS, *foreign.SECTIONS])),
    ),
    "pg": ("pg", "PostgreSQL gatekeeper", pg.SECTIONS),
}

#: The gatekeeper kind's schema of each backend.
GATEKEEPER: dict[str, Callable[[dict[str, Any], Path], Any]] = {
    "synthetic": synthetic.from_dict,
    "bookstore": tpcw.validate,
    "datasette": foreign.from_dict,
    "json-server": foreign.from_dict,
}


@dataclass(frozen=True)
class Spec:
    """A validated experiment file: its kind, its value (an `Experiment`; a `FarmExperiment`
    for the farm kind; a `pg.PgExperiment` for the pg kind; for the gatekeeper kind, by
    backend: the synthetic bench's options, the TPC-W configuration dict, the foreign bench's
    `Settings`; a `browser.BrowserExperiment` for the browser kind) and, for the gatekeeper
    kind, its backend."""

    path: Path
    kind: str
    value: Any
    backend: str | None = None


def kind_of(doc: dict[str, Any], path: Path) -> str:
    """The kind whose marker (a section, or the gatekeeper's `backend` key) the document has;
    without one, the kind sharing the most sections with it (its reader then names the
    misspelt section or the missing `backend`). A kind whose sections hold another marked
    kind's marker is the narrower one and wins (a farm file also has [experiment])."""
    marked = [k for k, (marker, _, _) in KINDS.items() if marker in doc]
    marked = [k for k in marked if not any(KINDS[k][0] in KINDS[j][2] for j in marked if j != k)]
    if len(marked) == 1:
        return marked[0]
    if len(marked) > 1:
        raise SpecError(path, "", f"the sections of one kind, not of {marked}")
    overlap = {k: len(set(doc) & set(sections)) for k, (_, _, sections) in KINDS.items()}
    best = max(overlap.values())
    if best and list(overlap.values()).count(best) == 1:
        return max(overlap, key=overlap.__getitem__)
    raise SpecError(
        path,
        "",
        'an experiment file: one of the sections [experiment] (static serving), or backend = "NAME"',
    )


def read_spec(
    path: str | Path, overrides: list[str] | None = None, kind: str | None = None, backend: str | None = None
) -> Spec:
    """Read, override and validate an experiment file of any kind (or of `kind`, and for the
    gatekeeper kind of `backend`, if given)."""
    path = Path(path)
    doc, text = read_toml(path)
    for ov in overrides or []:
        apply_override(doc, ov, path)
    if overrides:
        text = f"# {path} with overrides: {' '.join(overrides)}\n" + to_toml(doc)
    found = kind_of(doc, path)
    if kind is not None and found != kind:
        raise SpecError(path, "", f"a {KINDS[kind][1]} experiment file ({KINDS[kind][0]})", found)
    if found == "static":
        return Spec(path, found, experiment_from_dict(doc, path, text))
    if found == "farm":
        return Spec(path, found, farm.from_dict(doc, path, text))
    if found == "browser":
        return Spec(path, found, browser.from_dict(doc, path, text))
    if found == "pg":
        return Spec(path, found, pg.from_dict(doc, path))
    found_backend = doc.get("backend")
    allowed = list(GATEKEEPER) if backend is None else [backend]
    if found_backend not in allowed:
        raise SpecError(path, "backend", f"one of {allowed}", found_backend)
    return Spec(path, found, GATEKEEPER[found_backend](doc, path), found_backend)


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Read and validate a static serving experiment file (`read_spec` of kind static).

    `overrides` are `SECTION.KEY=VALUE` strings (VALUE in TOML syntax, e.g. `run.duration_s=60`
    or `experiment.loads=[0.8]`), applied before validation; the experiment's `source` is then
    the effective file, with the overrides noted in a header comment, so what is stored beside
    the results is exactly what ran."""
    return read_spec(path, overrides, kind="static").value
