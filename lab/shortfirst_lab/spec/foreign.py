"""The schema of a gatekeeper experiment on a backend the project did not write
(`lab/experiments/gatekeeper-datasette.toml`, `gatekeeper-json-server.toml`): `backend =
"NAME"` and its table `[NAME]`, `[run]` and `[calibrate]` (the arguments of `shortfirst
gatekeeper calibrate`). What each key means is documented in the experiment files;
`runners/gatekeeper/foreign/` runs them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import vocabulary
from .schema import (
    Field,
    SpecError,
    apply_override,
    check_backend,
    check_sections,
    check_table,
    positive,
    read_toml,
)

#: The backends such a file may name (each a `runners.gatekeeper.backends.foreign` backend).
BACKENDS = ("datasette", "json-server")
_DURATION = re.compile(r"^[0-9]*\.?[0-9]+(us|ms|s)$")
#: A patience rule of the gatekeeper's `--patience`: learn, off or a duration.
_PATIENCE = re.compile(r"^(learn|off|[0-9]*\.?[0-9]+(us|ms|s|m))$")

RUN: dict[str, Field] = {
    "duration_s": positive("number", True),
    "warmup_s": Field("number", True, lo=0),
    "timeout_s": positive("number", True),
    "max_queue_wait_s": positive("number"),
    "patience": Field("strs", what="patience rules: learn, off or a duration such as 20s"),
    "max_wait_s": positive("number"),
    "overdue_share": Field("number", lo=0, lo_open=True, hi=1, hi_open=True),
    "load_factor": positive("number", True),
    "think_s": positive("number", True),
    "seed": Field("int", lo=0),
    "modes": Field(
        "strs", True, what="direct or a gatekeeper policy (fifo, sjf, sjf-aging:X: `shortfirst vocabulary`)"
    ),
    "models": Field("strs", True, choices=("open", "closed")),
    "peak_clients": Field("ints", True, lo=1),
    "peak_s": positive("number", True),
    "peak_warmup_s": Field("number", True, lo=0),
    "peak_repeats": Field("int", lo=1),
    "peak_stop_after": Field("int", lo=1),
    "peak_stop_drop": Field("number", lo=0, lo_open=True, hi=1, hi_open=True),
}
CALIBRATE: dict[str, Field] = {
    "clients": Field("int", True, lo=1),
    "warmup": Field("str", True, what="a duration such as 2s"),
    "measure": Field("str", True, what="a duration such as 4s"),
    "repeats": Field("int", True, lo=1),
    "max_trials": Field("int", True, lo=1, hi=100),
    "refine_steps": Field("int", True, lo=0),
    "min": Field("str", True, what="a capacity such as 250ms"),
    "max": Field("str", True, what="a capacity such as 20s"),
}
BACKEND: dict[str, Field] = {
    "rows": Field("int", True, lo=1),
    "max_in_flight": Field("int", lo=1),
    "estimate_basis": Field("str", what="a cost basis (share, wall or serial: `shortfirst vocabulary`)"),
}
SECTIONS = ("run", "calibrate")


@dataclass
class Settings:
    """The experiment file's [run] and [calibrate] tables and its backend's (`backends`: its
    name and table; see the file for each key)."""

    duration_s: float
    warmup_s: float
    timeout_s: float
    load_factor: float
    think_s: float
    modes: list[str]
    models: list[str]
    peak_clients: list[int]
    peak_s: float
    peak_warmup_s: float
    calibrate: dict
    backends: dict = field(default_factory=dict)
    seed: int = 1
    #: Peak runs per client count, each on its own trace (seed + repeat).
    peak_repeats: int = 1
    #: The peak ladder (`peak_clients`, ascending) stops early once this many counts in a
    #: row have a median below (1 - `peak_stop_drop`) x the best median so far.
    peak_stop_after: int = 2
    peak_stop_drop: float = 0.15
    #: The gatekeeper's --max-queue-wait, if set (none: the proxy's default, no bound).
    max_queue_wait_s: float | None = None
    #: The gatekeeper's patience rules: every gated mode runs once with each.
    patience: list[str] = field(default_factory=lambda: ["learn"])
    #: The gatekeeper's --max-wait (sjf's wait bound) and --overdue-share, if set.
    max_wait_s: float | None = None
    overdue_share: float | None = None

    @classmethod
    def load(cls, path: Path, overrides: dict | None = None, sets: Sequence[str] = ()) -> Settings:
        """Reads and validates the file; `overrides` replace keys of its [run] table, `sets`
        are `SECTION.KEY=VALUE` overrides (the command line's `--set`), applied before."""
        doc, _ = read_toml(path)
        for override in sets:
            apply_override(doc, override, path)
        doc.setdefault("run", {}).update(overrides or {})
        return from_dict(doc, Path(path))


def from_dict(doc: dict[str, Any], path: Path) -> Settings:
    """Validates a parsed file: unknown sections and keys, types, bounds and the rules across
    keys are SpecErrors naming the file and the key."""
    name, doc = check_backend(path, doc, BACKENDS)
    check_sections(path, doc, (*SECTIONS, name), (*SECTIONS, name))
    run = doc["run"]
    check_table(path, "run", run, RUN)
    check_table(path, "calibrate", doc["calibrate"], CALIBRATE)
    _check_run(path, run)
    for key in ("warmup", "measure", "min", "max"):
        if not _DURATION.match(doc["calibrate"][key]):
            raise SpecError(path, f"calibrate.{key}", "a duration such as 250ms or 2s", doc["calibrate"][key])
    check_table(path, name, doc[name], BACKEND)
    basis = doc[name].get("estimate_basis")
    if basis is not None and basis not in vocabulary.estimate_bases():
        raise SpecError(path, f"{name}.estimate_basis", f"one of {list(vocabulary.estimate_bases())}", basis)
    return Settings(
        **{k: float(run[k]) if RUN[k].kind == "number" else run[k] for k in RUN if k in run},
        calibrate=dict(doc["calibrate"]),
        backends={name: dict(doc[name])},
    )


def _check_run(path: Path, run: dict[str, Any]) -> None:
    """The rules across [run]'s keys."""
    if run["warmup_s"] >= run["duration_s"]:
        raise SpecError(
            path, "run.warmup_s", f"less than run.duration_s ({run['duration_s']})", run["warmup_s"]
        )
    if run["peak_warmup_s"] >= run["peak_s"]:
        raise SpecError(
            path, "run.peak_warmup_s", f"less than run.peak_s ({run['peak_s']})", run["peak_warmup_s"]
        )
    c = run["peak_clients"]
    if any(a >= b for a, b in zip(c, c[1:], strict=False)):
        raise SpecError(path, "run.peak_clients", "a rising ladder of client counts", c)
    for i, rule in enumerate(run.get("patience", [])):
        if not _PATIENCE.match(rule):
            raise SpecError(path, f"run.patience[{i}]", "learn, off or a duration such as 20s", rule)
    if len(set(run.get("patience", []))) != len(run.get("patience", [])):
        raise SpecError(path, "run.patience", "each rule once", run["patience"])
    for i, mode in enumerate(run["modes"]):
        if mode != "direct" and not vocabulary.is_gatekeeper_policy(mode):
            raise SpecError(path, f"run.modes[{i}]", f"direct, {vocabulary.gatekeeper_policy_forms()}", mode)
