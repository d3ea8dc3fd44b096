"""The schema of a gatekeeper experiment on the TPC-W bookstore (`lab/experiments/
gatekeeper-tpcw*.toml`): `backend = "bookstore"`, its table `[bookstore]`, and `[postgres]`,
`[load]`, `[modes]` (with `[modes.browsers]`, a mode's own load points) and `[gatekeeper]`,
and the command line's replacements of its settings. What the keys mean is documented in the
experiment files and in `runners/gatekeeper/tpcw/`, which runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import vocabulary
from .schema import (
    Field,
    SpecError,
    check_backend,
    check_field,
    check_sections,
    check_table,
    positive,
    read_toml,
)

#: The bookstore's own bound (`BEST_SELLERS_REPEAT_MAX`), checked here too so that a bad value
#: stops the sweep before the database is generated, naming the setting.
BEST_SELLERS_REPEAT_MAX = 100


class SweepConfigError(SpecError):
    """A bad TPC-W experiment file: names the file, the key (`section.key`) and what was expected."""


def parse_capacity_us(text: str) -> int:
    """`800ms`, `2s`, `500us` or a bare number of ms → microseconds (the gatekeeper's units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise SpecError("capacity", "", "e.g. 800ms, 2s or 500us", text)
    scale = {"us": 1, "ms": 1_000, "s": 1_000_000, None: 1_000}[m.group(2)]
    return round(float(m.group(1)) * scale)


#: A mode's tier prefixes (`Mode`): the gatekeeper at the database tier, typing transactions by
#: the bookstore's route tags or by statement fingerprint only.
TIERS = {"db:": ("db", False), "db-fp:": ("db", True)}
#: A count-limited FIFO's cost capacity: one that never binds, so that only `--max-in-flight`
#: does (an hour of backend time in flight).
UNBOUNDED_CAPACITY = "3600s"


@dataclass(frozen=True)
class Mode:
    """One mode of `[modes] list`: `direct`; a gatekeeper policy (`fifo`, `sjf`,
    `sjf-aging:X`) in front of the bookstore (the HTTP tier); with `db:` the gatekeeper between
    the bookstore and PostgreSQL, typing transactions by the bookstore's route tags (the
    bookstore tags its statements), with `db-fp:` by statement fingerprint only (it does not).
    `count:N` in place of a policy is FIFO with at most N admitted and no cost capacity (a
    pool-like bound by count). Each but `direct` takes its own capacity after `@`."""

    text: str
    tier: str  # "direct", "http" or "db"
    policy: str = "fifo"
    capacity: str | None = None
    max_in_flight: int | None = None
    by_fingerprint: bool = False

    @property
    def takes_db_capacity(self) -> bool:
        """Whether the mode runs at the database tier's capacity (`[gatekeeper] db_capacity`):
        a database-tier mode with neither its own capacity nor a count bound."""
        return self.tier == "db" and self.capacity is None and self.max_in_flight is None

    @property
    def gatekeeper_flags(self) -> dict[str, Any]:
        """The mode's own keyword arguments of `commands.gatekeeper` (policy, capacity if its
        own, the count bound)."""
        flags: dict[str, Any] = {"policy": self.policy}
        if self.max_in_flight is not None:
            flags.update(capacity=UNBOUNDED_CAPACITY, max_in_flight=self.max_in_flight)
        elif self.capacity is not None:
            flags["capacity"] = self.capacity
        return flags


def parse_mode(text: str) -> Mode:
    """`text` as a `Mode`; a `SpecError` naming what a mode may be otherwise."""
    if text == "direct":
        return Mode(text, "direct")
    expected = (
        f"direct, or [db:|db-fp:]POLICY[@CAPACITY] with POLICY {vocabulary.gatekeeper_policy_forms()}"
        " or count:N"
    )
    tier, by_fingerprint, rest = "http", False, text
    for prefix, (t, fp) in TIERS.items():
        if text.startswith(prefix):
            tier, by_fingerprint, rest = t, fp, text[len(prefix) :]
    policy, at, capacity = rest.partition("@")
    if at:
        try:
            parse_capacity_us(capacity)
        except SpecError:
            if capacity != "auto":
                what = expected + " (CAPACITY: auto or a capacity such as 800ms)"
                raise SpecError("mode", "", what, text) from None
    count = re.fullmatch(r"count:([1-9][0-9]{0,5})", policy)
    if count:
        if at:
            raise SpecError("mode", "", "count:N without @CAPACITY (it has none)", text)
        return Mode(text, tier, "fifo", None, int(count.group(1)), by_fingerprint)
    if not vocabulary.is_gatekeeper_policy(policy):
        raise SpecError("mode", "", expected, text)
    return Mode(text, tier, policy, capacity if at else None, None, by_fingerprint)


#: The experiment file's schema, section by section. `[modes.browsers]` (a mode's own load
#: points) and the cross-key rules are checked in `validate`.
SCHEMA: dict[str, dict[str, Field]] = {
    "bookstore": {
        "items": Field("int", True, lo=1),
        "customers": Field("int", True, lo=1),
        "seed": Field("int", lo=0),
        "pool": Field("int", lo=1, hi=10_000),
        "best_sellers_repeat": Field("int", lo=1, hi=BEST_SELLERS_REPEAT_MAX),
    },
    "postgres": {
        "shared_buffers": Field("str", what="a PostgreSQL size such as 32MB"),
        "work_mem": Field("str", what="a PostgreSQL size such as 4MB"),
        "memory_limit_mb": Field("int", lo=1),
        "read_iops_limit": Field("int", lo=1),
    },
    "load": {
        "think": Field("str", what="a load-generator distribution such as exp:0.7:7 or const:0"),
        "think_mean_s": positive("number"),
        "think_max_s": positive("number"),
        "duration_s": positive("number", True),
        "warmup_s": Field("number", True, lo=0),
        "browsers": Field("ints", True, lo=1),
        "seed": Field("int", lo=0),
        "client_timeout_s": positive("number"),
    },
    "modes": {
        "list": Field("strs", True),
        "browsers": Field("table"),
    },
    "gatekeeper": {
        "capacity": Field("str", what="calibrate, auto or a capacity such as 2000ms"),
        "max_queue_wait_s": positive("number"),
        "calibrate_with": Field("str", choices=("closed-loop", "browsers")),
        "calibrate_browsers": Field("int", lo=1),
        "calibrate_browsers_duration_s": positive("number"),
        "calibrate_browsers_warmup_s": Field("number", lo=0),
        "calibrate_clients": Field("int", lo=1),
        "calibrate_warmup_s": Field("number", lo=0),
        "calibrate_measure_s": positive("number"),
        "calibrate_min": Field("str", what="a capacity such as 800ms"),
        "calibrate_max": Field("str", what="a capacity such as 12800ms"),
        "calibrate_growth": Field("number", lo=1, lo_open=True),
        "calibrate_within": Field("number", lo=0, hi=1, hi_open=True),
        "calibrate_max_trials": Field("int", lo=1, hi=100),
        # The database tier's capacity (modes `db:`/`db-fp:` without their own): a page's charge
        # there is its transactions' time, not the whole page's, so the HTTP tier's does not carry
        # over. "calibrate" runs the browsers' calibration with `db:fifo` from db_calibrate_min to
        # db_calibrate_max (calibrate_with must be "browsers").
        "db_capacity": Field("str", what="calibrate, auto or a capacity such as 200ms"),
        "db_calibrate_min": Field("str", what="a capacity such as 50ms"),
        "db_calibrate_max": Field("str", what="a capacity such as 800ms"),
    },
}
REQUIRED_SECTIONS = ("bookstore", "load", "modes")


def _check_capacity(path: Path, key: str, text: str, words: tuple[str, ...]) -> None:
    if text in words:
        return
    try:
        parse_capacity_us(text)
    except SpecError:
        raise SweepConfigError(path, key, f"one of {list(words)} or a capacity such as 800ms", text) from None


def _check_modes(path: Path, modes: dict, load: dict) -> None:
    """Each mode parses (`parse_mode`); `[modes.browsers]` names listed modes only."""
    for i, mode in enumerate(modes["list"]):
        try:
            parse_mode(mode)
        except SpecError as e:
            raise SweepConfigError(path, f"modes.list[{i}]", e.expected, mode) from None
    for mode, points in modes.get("browsers", {}).items():
        if mode not in modes["list"]:
            raise SweepConfigError(path, f"modes.browsers.{mode}", f"a mode of modes.list {modes['list']}")
        check_field(path, f"modes.browsers.{mode}", SCHEMA["load"]["browsers"], points)


def validate(cfg: dict, path: Path) -> dict:
    """Checks an experiment file's contents against `SCHEMA`: unknown sections and keys, wrong
    types and out-of-range values are errors naming the file and the key. Returns `cfg`."""
    try:
        _, sections = check_backend(path, cfg, ("bookstore",))
        check_sections(path, sections, tuple(SCHEMA), REQUIRED_SECTIONS)
        for name, fields in SCHEMA.items():
            check_table(path, name, cfg.get(name, {}), fields)
    except SpecError as e:
        raise SweepConfigError(e.path, e.key, e.expected, e.got) from None
    load, gk = cfg["load"], cfg.get("gatekeeper", {})
    if "think" not in load and not ("think_mean_s" in load and "think_max_s" in load):
        raise SweepConfigError(path, "load.think_mean_s", "think_mean_s and think_max_s, or think (required)")
    if load["warmup_s"] >= load["duration_s"]:
        raise SweepConfigError(
            path, "load.warmup_s", f"less than load.duration_s ({load['duration_s']})", load["warmup_s"]
        )
    _check_modes(path, cfg["modes"], load)
    for key in ("capacity", "db_capacity"):
        if key in gk:
            _check_capacity(path, f"gatekeeper.{key}", gk[key], ("calibrate", "auto"))
    needs_db_capacity = any(parse_mode(m).takes_db_capacity for m in cfg["modes"]["list"])
    if needs_db_capacity and gk.get("db_capacity", "calibrate") == "calibrate":
        if gk.get("calibrate_with") != "browsers":
            expected = 'a capacity, auto, or calibrate_with = "browsers"'
            raise SweepConfigError(path, "gatekeeper.db_capacity", expected, "calibrate")
    for key in ("calibrate_min", "calibrate_max", "db_calibrate_min", "db_calibrate_max"):
        if key in gk:
            _check_capacity(path, f"gatekeeper.{key}", gk[key], ())
    return cfg


#: The command line's overrides (`python -m shortfirst_lab tpcw sweep --modes ...`) and the
#: section each sets; `modes`, `browsers`, `max_queue_wait_s` and `postgres` are handled apart.
_OVERRIDE_SECTION = {
    "capacity": "gatekeeper",
    "db_capacity": "gatekeeper",
    "calibrate_with": "gatekeeper",
    "think": "load",
    "duration_s": "load",
    "warmup_s": "load",
    "client_timeout_s": "load",
    "items": "bookstore",
    "customers": "bookstore",
    "best_sellers_repeat": "bookstore",
}


def apply_overrides(cfg: dict, overrides: dict[str, Any]) -> dict:
    """The command line's replacements of the file's settings (None: keep the file's). A list of
    browsers replaces every mode's own load points too."""
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "modes":
            cfg.setdefault("modes", {})["list"] = value
        elif key == "browsers":
            cfg.setdefault("load", {})["browsers"] = value
            cfg.setdefault("modes", {}).pop("browsers", None)
        elif key == "max_queue_wait_s":
            # 0 on the command line: no limit.
            if value:
                cfg.setdefault("gatekeeper", {})[key] = value
            else:
                cfg.setdefault("gatekeeper", {}).pop(key, None)
        elif key == "postgres":
            cfg.setdefault("postgres", {}).update({k: v for k, v in value.items() if v is not None})
        elif key in _OVERRIDE_SECTION:
            cfg.setdefault(_OVERRIDE_SECTION[key], {})[key] = value
        else:
            raise SpecError("<command line>", key, "a known override", value)
    return cfg


def load_config(path: Path, overrides: dict | None = None) -> dict:
    """Reads an experiment file, applies the command line's `overrides` and validates the
    result (`validate`): a bad file stops the sweep before anything starts."""
    path = Path(path)
    cfg, _ = read_toml(path)
    return validate(apply_overrides(cfg, overrides or {}), path)
