"""The schema of a gatekeeper experiment on the synthetic upstream (`lab/experiments/
gatekeeper-synthetic.toml`, run by `python -m shortfirst_lab bench gatekeeper-synthetic FILE`):
`backend = "synthetic"`, its table `[synthetic]` (the upstream of `shortfirst gatekeeper
synthetic-upstream`), `[run]`,
`[gatekeeper]` and `[overhead]`. A file gives the bench's settings; the bench's flags of the
same names override them (`OPTIONS` maps each key to its flag's destination).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import vocabulary
from .schema import Field, SpecError, check_backend, check_sections, check_table, positive

_CONFIGS = "direct or a gatekeeper policy (fifo, sjf, sjf-aging:X: `shortfirst vocabulary`)"

#: Section → key → (field, the bench option's destination).
OPTIONS: dict[str, dict[str, tuple[Field, str]]] = {
    "synthetic": {
        "scale": (positive("number"), "scale"),
        "cpus": (Field("int", lo=1), "cpus"),
        "slots": (Field("int", lo=1), "slots"),
        "thrash": (Field("number", lo=0), "thrash"),
    },
    "run": {
        "think_s": (positive("number"), "think_s"),
        "duration_s": (positive("number"), "duration"),
        "warmup_s": (Field("number", lo=0), "warmup"),
        "closed_factors": (Field("numbers", lo=0, lo_open=True), "closed_factors"),
        "open_factors": (Field("numbers", lo=0, lo_open=True), "open_factors"),
        "timeout_s": (positive("number"), "timeout"),
        "sample_ms": (Field("number", lo=0), "sample_ms"),
        "seed": (Field("int", lo=0), "seed"),
        "configs": (Field("strs", what=_CONFIGS), "configs"),
        "open_configs": (Field("strs", what=_CONFIGS), "open_configs"),
    },
    "gatekeeper": {
        "capacity": (Field("str", what="calibrate, auto or a cost such as 80ms"), "capacity"),
        "max_in_flight": (Field("int", lo=0), "max_in_flight"),
        "max_queue_wait": (Field("text", what="rule, none or seconds"), "max_queue_wait"),
        "max_charge_share": (Field("text", what="none, rule or a fraction in (0, 1]"), "max_charge_share"),
        "args": (Field("strs"), "gatekeeper_args"),
    },
    "overhead": {
        "rate": (positive("number"), "overhead_rate"),
        "rounds": (Field("int", lo=1), "overhead_rounds"),
        "duration_s": (positive("number"), "overhead_duration"),
        "busy_poll_us": (Field("int", lo=0), "overhead_busy_poll_us"),
        "nginx": (Field("str", choices=("auto", "yes", "no")), "overhead_nginx"),
    },
}
SECTIONS = tuple(OPTIONS)


def _option(value: Any) -> Any:
    """A file value as the bench's flag reads it: lists comma-joined, numbers of a text key as
    written."""
    if isinstance(value, list):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return value


def from_dict(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """Validates a parsed file; the bench's option destinations and their values."""
    _, doc = check_backend(path, doc, ("synthetic",))
    check_sections(path, doc, SECTIONS, ("synthetic",))
    out: dict[str, Any] = {}
    for name, keys in OPTIONS.items():
        table = doc.get(name, {})
        check_table(path, name, table, {k: f for k, (f, _) in keys.items()})
        for key, value in table.items():
            out[keys[key][1]] = " ".join(value) if key == "args" else _option(value)
    for key in ("configs", "open_configs"):
        for i, c in enumerate(doc.get("run", {}).get(key, [])):
            if c != "direct" and not vocabulary.is_gatekeeper_policy(c):
                raise SpecError(path, f"run.{key}[{i}]", f"direct, {vocabulary.gatekeeper_policy_forms()}", c)
    run = doc.get("run", {})
    if run.get("warmup_s", 0) >= run.get("duration_s", float("inf")):
        raise SpecError(
            path, "run.warmup_s", f"less than run.duration_s ({run['duration_s']})", run["warmup_s"]
        )
    return out
