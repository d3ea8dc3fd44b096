"""The schema of the PostgreSQL gatekeeper's experiment (`lab/experiments/pg-gatekeeper.toml`,
the `pg` kind, marked by its `[pg]` table): the database and its pgbench data (`[pg]`), the
overhead and protocol-coverage experiment (`[overhead]`) and the cheap-behind-expensive
overload (`[overload]`). What each key means is documented in the experiment file;
`runners/gatekeeper/pg/` runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import vocabulary
from .schema import Field, SpecError, check_sections, check_table, positive

SECTIONS = ("pg", "overhead", "overload")
#: pgbench's query protocols (`-M`).
PROTOCOLS = ("simple", "extended", "prepared")
#: The overhead experiment's scripts: pgbench's builtins `select-only` (`-S`) and
#: `tpcb-like`, and `distinct`, a generated script of `distinct_texts` statement texts.
OVERHEAD_SCRIPTS = ("select-only", "tpcb-like", "distinct")
#: The overhead experiment's arm of the gatekeeper in front of PgBouncer (its pool).
POOLED_ARM = "gatekeeper+pgbouncer"
#: The overhead experiment's arms.
OVERHEAD_ARMS = ("direct", "pgbouncer", "gatekeeper", POOLED_ARM)
#: An overload arm: direct, pgbouncer, or a gatekeeper policy, `@auto` for `--capacity auto`
#: (without it the capacity measured in the run), `+BASIS` for a cost basis other than
#: `overload.estimate_basis`, `+bound` for the starvation bound (`overload.max_wait_s` and
#: `overload.overdue_share`), `+shed` for the queue-wait bound (`overload.max_queue_wait_s`;
#: see `overload_arm`).
BOUND = "bound"
SHED = "shed"
_SIZE = re.compile(r"^[0-9]+(kB|MB|GB)$")

#: Where the proxies run with a CPU reservation: beside the database on its reserved CPU, or
#: with the clients on the others.
PROXY_CPUS = ("database", "clients")

PG: dict[str, Field] = {
    "scale": Field("int", True, lo=1, hi=1000, what="pgbench -i scale: 100,000 accounts each"),
    "max_connections": Field("int", True, lo=10, hi=2000),
    "shared_buffers": Field("str", True, what="a size such as 256MB"),
    "pool_size": Field("int", True, lo=1, hi=1000),
    "seed": Field("int", True, lo=0),
    "proxy_nice": Field("int", True, lo=-20, hi=19, what="the proxies' nice value (nice -n)"),
    "proxy_cpu": Field("str", True, choices=PROXY_CPUS),
    "proxy_slice_us": Field(
        "int", True, lo=0, hi=100_000, what="the proxies' scheduler slice in µs (0: the kernel's)"
    ),
}
OVERHEAD: dict[str, Field] = {
    "arms": Field("strs", True, choices=OVERHEAD_ARMS),
    "scripts": Field("strs", True, choices=OVERHEAD_SCRIPTS),
    "protocols": Field("strs", True, choices=PROTOCOLS),
    "clients": Field("ints", True, lo=1, hi=1000),
    "duration_s": positive("number", True),
    "distinct_texts": Field("int", True, lo=1, hi=100_000),
    "policy": Field("str", True, what="a gatekeeper policy (`shortfirst vocabulary`)"),
}
#: The overload experiment's clients: `shortfirst load-pg` (a refusal or a timeout does not
#: end a client) or pgbench (its first error ends a client).
GENERATORS = ["load-pg", "pgbench"]

OVERLOAD: dict[str, Field] = {
    "arms": Field(
        "strs", True, what="direct, pgbouncer, or a gatekeeper policy, optionally @auto and +BASIS"
    ),
    "loads": Field("numbers", True, lo=0, lo_open=True, hi=10),
    "protocol": Field("str", True, choices=PROTOCOLS[:2]),
    "duration_s": positive("number", True),
    "warmup_s": Field("number", True, lo=0),
    "timeout_s": positive("number", True),
    "expensive_share": Field("number", True, lo=0, lo_open=True, hi=1, hi_open=True),
    "expensive_rows": Field("int", True, lo=1),
    "cheap_clients": Field("int", True, lo=1, hi=1000),
    "expensive_clients": Field("int", True, lo=1, hi=1000),
    "capacity_s": positive("number", True),
    "capacity_clients": Field("int", True, lo=1, hi=256),
    "capacity_probe_s": Field("number", True, lo=1, hi=600),
    "capacity_probe_load": Field("number", True, lo=0, lo_open=True, hi=1),
    "cheap_room": Field("number", True, lo=0),
    "estimate_basis": Field("str", True, what="a cost basis (`shortfirst vocabulary`)"),
    "generator": Field("str", True, choices=GENERATORS),
    "max_wait_s": positive("number", True),
    "overdue_share": Field("number", True, lo=0, lo_open=True, hi=1),
    "max_queue_wait_s": positive("number", True),
}


@dataclass(frozen=True)
class Overhead:
    """[overhead]: every arm × script × protocol × client count, `duration_s` each."""

    arms: list[str]
    scripts: list[str]
    protocols: list[str]
    clients: list[int]
    duration_s: float
    distinct_texts: int
    policy: str


@dataclass(frozen=True)
class Overload:
    """[overload]: the two pgbench processes at each load, through each arm."""

    arms: list[str]
    loads: list[float]
    protocol: str
    duration_s: float
    warmup_s: float
    timeout_s: float
    expensive_share: float
    expensive_rows: int
    cheap_clients: int
    expensive_clients: int
    capacity_s: float
    capacity_clients: int
    capacity_probe_s: float
    capacity_probe_load: float
    cheap_room: float
    estimate_basis: str
    generator: str
    max_wait_s: float
    overdue_share: float
    max_queue_wait_s: float


@dataclass(frozen=True)
class PgExperiment:
    """A validated `pg` experiment file."""

    scale: int
    max_connections: int
    shared_buffers: str
    pool_size: int
    seed: int
    proxy_nice: int
    proxy_cpu: str
    proxy_slice_us: int
    overhead: Overhead
    overload: Overload


def from_dict(doc: dict[str, Any], path: Path) -> PgExperiment:
    """Validates a parsed file: unknown sections and keys, types, bounds and the rules across
    keys are SpecErrors naming the file and the key."""
    check_sections(path, doc, SECTIONS, SECTIONS)
    check_table(path, "pg", doc["pg"], PG)
    check_table(path, "overhead", doc["overhead"], OVERHEAD)
    check_table(path, "overload", doc["overload"], OVERLOAD)
    pg, oh, ol = doc["pg"], doc["overhead"], doc["overload"]
    if not _SIZE.match(pg["shared_buffers"]):
        raise SpecError(path, "pg.shared_buffers", "a size such as 256MB", pg["shared_buffers"])
    if not vocabulary.is_gatekeeper_policy(oh["policy"]):
        raise SpecError(path, "overhead.policy", vocabulary.gatekeeper_policy_forms(), oh["policy"])
    for i, arm in enumerate(ol["arms"]):
        a = overload_arm(arm)
        if arm in ("direct", "pgbouncer"):
            continue
        if (
            spell_arm(a) != arm
            or not vocabulary.is_gatekeeper_policy(a.policy)
            or (a.basis is not None and a.basis not in vocabulary.estimate_bases())
        ):
            raise SpecError(
                path, f"overload.arms[{i}]", "direct, pgbouncer, or POLICY[@auto][+BASIS][+bound][+shed]", arm
            )
    if ol["estimate_basis"] not in vocabulary.estimate_bases():
        bases = " or ".join(vocabulary.estimate_bases())
        raise SpecError(path, "overload.estimate_basis", bases, ol["estimate_basis"])
    for key in ("arms", "loads"):
        if len(set(ol[key])) != len(ol[key]):
            raise SpecError(path, f"overload.{key}", "each value once", ol[key])
    if ol["generator"] == "pgbench" and any(overload_arm(a).shed for a in ol["arms"]):
        raise SpecError(
            path, "overload.arms", "no +shed arm with pgbench (a refusal ends its client)", ol["arms"]
        )
    if ol["generator"] == "load-pg" and ol["protocol"] != "simple":
        raise SpecError(path, "overload.protocol", "simple (load-pg's protocol)", ol["protocol"])
    if 0 < pg["proxy_slice_us"] < 100:
        raise SpecError(
            path, "pg.proxy_slice_us", "0 (the kernel's slice) or 100..100000 µs", pg["proxy_slice_us"]
        )
    if ol["warmup_s"] >= ol["duration_s"]:
        raise SpecError(
            path, "overload.warmup_s", f"less than overload.duration_s ({ol['duration_s']})", ol["warmup_s"]
        )
    if ol["expensive_rows"] > 100_000 * pg["scale"]:
        raise SpecError(
            path,
            "overload.expensive_rows",
            f"at most the {100_000 * pg['scale']} accounts",
            ol["expensive_rows"],
        )
    if max(*oh["clients"], ol["cheap_clients"] + ol["expensive_clients"]) > pg["max_connections"] - 5:
        raise SpecError(
            path,
            "pg.max_connections",
            "room for every client of either experiment and 5 more",
            pg["max_connections"],
        )
    floats = (
        "duration_s", "warmup_s", "timeout_s", "expensive_share", "capacity_s", "capacity_probe_s",
        "capacity_probe_load", "cheap_room", "max_wait_s", "overdue_share", "max_queue_wait_s",
    )  # fmt: skip
    return PgExperiment(
        **{k: pg[k] for k in PG},
        overhead=Overhead(**{k: float(oh[k]) if k == "duration_s" else oh[k] for k in OVERHEAD}),
        overload=Overload(
            **{k: float(ol[k]) if k in floats else ol[k] for k in OVERLOAD if k != "loads"},
            loads=[float(x) for x in ol["loads"]],
        ),
    )


class Arm(NamedTuple):
    """An overload arm's parts (`overload_arm`)."""

    policy: str
    #: `--capacity auto` rather than the capacity measured in the run.
    auto: bool
    #: Its own cost basis, or None for `overload.estimate_basis`.
    basis: str | None
    #: With the starvation bound: `--max-wait overload.max_wait_s --overdue-share
    #: overload.overdue_share`.
    bound: bool
    #: With the queue-wait bound: `--max-queue-wait overload.max_queue_wait_s`.
    shed: bool


def overload_arm(arm: str) -> Arm:
    """An overload arm's parts: `POLICY[@auto][+BASIS][+bound][+shed]`; `direct` and
    `pgbouncer` as themselves."""
    head, *extras = arm.split("+")
    policy, _, auto = head.partition("@")
    basis = next((e for e in extras if e not in (BOUND, SHED)), None)
    return Arm(policy, auto == "auto", basis, BOUND in extras, SHED in extras)


def spell_arm(a: Arm) -> str:
    """The arm's name, its parts in the one order `overload_arm` reads."""
    return (
        a.policy
        + ("@auto" if a.auto else "")
        + (f"+{a.basis}" if a.basis is not None else "")
        + (f"+{BOUND}" if a.bound else "")
        + (f"+{SHED}" if a.shed else "")
    )
