"""What a sweep is made of: the bookstore's pages and mix, the binaries, the settings of the
experiment file and the errors that stop a sweep.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import REPO, LabError

PG_SH = REPO / "examples" / "bookstore" / "pg.sh"


SESSION_FILE = REPO / "examples" / "bookstore" / "tpcw-shopping.toml"


#: Page code → (path, interaction name), as served by the bookstore (``bookstore routes``).
PAGES: dict[str, tuple[str, str]] = {
    "HOME": ("/home", "Home"),
    "NEWP": ("/new_products", "New Products"),
    "BESS": ("/best_sellers", "Best Sellers"),
    "PROD": ("/product_detail", "Product Detail"),
    "SREQ": ("/search_request", "Search Request"),
    "SRES": ("/search_results", "Search Results"),
    "SHOP": ("/shopping_cart", "Shopping Cart"),
    "CREG": ("/customer_registration", "Customer Registration"),
    "BUYR": ("/buy_request", "Buy Request"),
    "BUYC": ("/buy_confirm", "Buy Confirm"),
    "ORDI": ("/order_inquiry", "Order Inquiry"),
    "ORDD": ("/order_display", "Order Display"),
    "ADMR": ("/admin_request", "Admin Request"),
    "ADMC": ("/admin_confirm", "Admin Confirm"),
}


PATH_TO_CODE = {path: code for code, (path, _) in PAGES.items()}


#: Request mix for ``shortfirst gatekeeper calibrate``: the shopping mix's page frequencies
#: (the Gatekeeper paper's Table 1 column, percent; Customer Registration from the mix's flow).
CALIBRATION_MIX = {
    "HOME": 16.0,
    "NEWP": 5.0,
    "BESS": 5.0,
    "PROD": 17.0,
    "SREQ": 20.0,
    "SRES": 17.0,
    "SHOP": 11.6,
    "CREG": 3.0,
    "BUYR": 2.6,
    "BUYC": 1.2,
    "ORDI": 0.75,
    "ORDD": 0.66,
    "ADMR": 0.1,
    "ADMC": 0.09,
}


class TpcwError(LabError, RuntimeError):
    """A component failed to start or a run produced no usable result."""


@dataclass
class Binaries:
    shortfirst: Path
    bookstore: Path

    @classmethod
    def default(cls, profile: str = "release") -> Binaries:
        return cls(REPO / "target" / profile / "shortfirst", REPO / "target" / profile / "bookstore")

    def check(self) -> None:
        for b in (self.shortfirst, self.bookstore):
            if not b.exists():
                raise TpcwError(f"{b} not built (make build bookstore-build)")


@dataclass(frozen=True)
class PgSettings:
    """How the experiment's PostgreSQL runs (the experiment file's ``[postgres]`` table).

    ``memory_limit_mb`` puts the postmaster (hence every backend) in its own cgroup-v1 memory group
    with that limit, set after the data is generated: shared buffers, the backends' private memory
    and the page cache of the database files all count against it, so that many concurrent backends
    squeeze the cache and reads go to disk — the memory pressure behind the paper's collapse of
    direct access (its Table 2). ``read_iops_limit`` caps the server's reads from its disk (a blkio
    group of the same name), for a disk as slow as the paper's era when the machine's is not. Both
    need root; ``None`` runs without groups."""

    shared_buffers: str = "256MB"
    work_mem: str = "8MB"
    memory_limit_mb: int | None = None
    read_iops_limit: int | None = None

    @property
    def needs_groups(self) -> bool:
        return self.memory_limit_mb is not None or self.read_iops_limit is not None

    @classmethod
    def from_config(cls, table: dict) -> PgSettings:
        known = {"shared_buffers", "work_mem", "memory_limit_mb", "read_iops_limit"}
        unknown = set(table) - known
        if unknown:
            raise TpcwError(f"[postgres]: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        for key in ("memory_limit_mb", "read_iops_limit"):
            v = table.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise TpcwError(f"[postgres] {key} must be a positive integer, got {v!r}")
        return cls(
            str(table.get("shared_buffers", cls.shared_buffers)),
            str(table.get("work_mem", cls.work_mem)),
            table.get("memory_limit_mb"),
            table.get("read_iops_limit"),
        )


# The bookstore's own bound (`BEST_SELLERS_REPEAT_MAX`), checked here too so that a bad value
# stops the sweep before the database is generated, naming the setting.
BEST_SELLERS_REPEAT_MAX = 100


def best_sellers_repeat_of(bookstore_cfg: dict) -> int | None:
    """``[bookstore] best_sellers_repeat`` (runs of Best Sellers' query per request, a declared
    deviation from TPC-W), validated; None if unset (once, as TPC-W)."""
    value = bookstore_cfg.get("best_sellers_repeat")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BEST_SELLERS_REPEAT_MAX:
        raise TpcwError(
            f"[bookstore] best_sellers_repeat must be an integer from 1 to {BEST_SELLERS_REPEAT_MAX}"
            f" (runs of its query per request), got {value!r}"
        )
    return value


def think_max_s(think: str) -> float:
    """The longest think time of a load-generator distribution: ``exp:MEAN:MAX`` → MAX,
    ``const:S`` → S; otherwise unbounded (``inf``), so no browser is inferred to be waiting."""
    name, _, rest = think.partition(":")
    nums = rest.split(":")
    try:
        if name == "exp" and len(nums) == 2:
            return float(nums[1])
        if name == "const" and len(nums) == 1:
            return float(nums[0])
    except ValueError:
        pass
    return math.inf


def browsers_for(cfg: dict, mode: str) -> list[int]:
    """Load points of ``mode``: ``[modes.browsers]`` may give a mode its own list (the aging and
    auto modes are measured at fewer points to fit the time budget); otherwise ``[load] browsers``."""
    own = cfg["modes"].get("browsers", {}).get(mode)
    return [int(n) for n in (own if own is not None else cfg["load"]["browsers"])]


def parse_capacity_us(text: str) -> int:
    """``800ms``, ``2s``, ``500us`` or a bare number of ms → microseconds (the gatekeeper's units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise TpcwError(f"capacity {text!r}: expected e.g. 800ms, 2s or 500us")
    scale = {"us": 1, "ms": 1_000, "s": 1_000_000, None: 1_000}[m.group(2)]
    return round(float(m.group(1)) * scale)


class SweepConfigError(TpcwError):
    """A bad experiment file: names the file, the key (``section.key``) and what was expected."""

    def __init__(self, path: Path | str, key: str, expected: str, got: Any = None):
        self.path, self.key = str(path), key
        msg = f"{path}: {key}: {expected}" if key else f"{path}: {expected}"
        super().__init__(msg + ("" if got is None else f", got {got!r}"))


@dataclass(frozen=True)
class Field:
    """One key of the schema: its kind (``int``, ``number``, ``str``, ``ints``, ``strs``),
    bounds and choices; ``required`` keys must be present after the overrides."""

    kind: str
    required: bool = False
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    what: str = ""


def _positive(kind: str, required: bool = False) -> Field:
    return Field(kind, required, lo=0, lo_open=True)


#: The experiment file's schema, section by section. ``[modes.browsers]`` (a mode's own load
#: points) and the cross-key rules are checked in ``validate``.
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
        "think_mean_s": _positive("number"),
        "think_max_s": _positive("number"),
        "duration_s": _positive("number", True),
        "warmup_s": Field("number", True, lo=0),
        "browsers": Field("ints", True, lo=1),
        "seed": Field("int", lo=0),
        "client_timeout_s": _positive("number"),
    },
    "modes": {
        "list": Field("strs", True),
        "browsers": Field("table"),
    },
    "gatekeeper": {
        "capacity": Field("str", what="calibrate, auto or a capacity such as 2000ms"),
        "max_queue_wait_s": _positive("number"),
        "calibrate_with": Field("str", choices=("closed-loop", "browsers")),
        "calibrate_browsers": Field("int", lo=1),
        "calibrate_browsers_duration_s": _positive("number"),
        "calibrate_browsers_warmup_s": Field("number", lo=0),
        "calibrate_clients": Field("int", lo=1),
        "calibrate_warmup_s": Field("number", lo=0),
        "calibrate_measure_s": _positive("number"),
        "calibrate_min": Field("str", what="a capacity such as 800ms"),
        "calibrate_max": Field("str", what="a capacity such as 12800ms"),
        "calibrate_growth": Field("number", lo=1, lo_open=True),
        "calibrate_within": Field("number", lo=0, hi=1, hi_open=True),
        "calibrate_max_trials": Field("int", lo=1, hi=100),
    },
}
REQUIRED_SECTIONS = ("bookstore", "load", "modes")
_POLICY = re.compile(r"^(fifo|sjf|sjf-aging:[0-9]*\.?[0-9]+)$")


def _check_field(path: Path, key: str, f: Field, v: Any) -> None:
    """Type, bounds and choices of one value; raises SweepConfigError naming ``key``."""
    if f.kind == "table":
        if not isinstance(v, dict):
            raise SweepConfigError(path, key, "a table", v)
        return
    if f.kind in ("ints", "strs"):
        if not isinstance(v, list) or not v:
            raise SweepConfigError(path, key, "a non-empty list", v)
        for i, x in enumerate(v):
            _check_field(path, f"{key}[{i}]", Field(f.kind[:-1], lo=f.lo, hi=f.hi), x)
        return
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "number": isinstance(v, int | float) and not isinstance(v, bool),
        "str": isinstance(v, str),
    }[f.kind]
    if not ok:
        kind = {"int": "an integer", "number": "a number", "str": "a string"}[f.kind]
        raise SweepConfigError(path, key, kind + (f" ({f.what})" if f.what else ""), v)
    if f.choices and v not in f.choices:
        raise SweepConfigError(path, key, f"one of {list(f.choices)}", v)
    if isinstance(v, str):
        return
    if not math.isfinite(v):
        raise SweepConfigError(path, key, "a finite number", v)
    if f.lo is not None and (v < f.lo or (f.lo_open and v == f.lo)):
        raise SweepConfigError(path, key, f"a value {'>' if f.lo_open else '>='} {f.lo:g}", v)
    if f.hi is not None and (v > f.hi or (f.hi_open and v == f.hi)):
        raise SweepConfigError(path, key, f"a value {'<' if f.hi_open else '<='} {f.hi:g}", v)


def _check_capacity(path: Path, key: str, text: str, words: tuple[str, ...]) -> None:
    if text in words:
        return
    try:
        parse_capacity_us(text)
    except TpcwError:
        raise SweepConfigError(path, key, f"one of {list(words)} or a capacity such as 800ms", text) from None


def _check_modes(path: Path, modes: dict, load: dict) -> None:
    """Each mode is ``direct`` or a gatekeeper policy (fifo, sjf, sjf-aging:X), a policy with an
    optional capacity after ``@``; ``[modes.browsers]`` names listed modes only."""
    for i, mode in enumerate(modes["list"]):
        policy, at, capacity = mode.partition("@")
        if mode == "direct":
            continue
        if not _POLICY.match(policy):
            raise SweepConfigError(
                path, f"modes.list[{i}]", "direct, fifo, sjf or sjf-aging:X (optionally @CAPACITY)", mode
            )
        if at:
            _check_capacity(path, f"modes.list[{i}]", capacity, ("auto",))
    for mode, points in modes.get("browsers", {}).items():
        if mode not in modes["list"]:
            raise SweepConfigError(path, f"modes.browsers.{mode}", f"a mode of modes.list {modes['list']}")
        _check_field(path, f"modes.browsers.{mode}", SCHEMA["load"]["browsers"], points)


def validate(cfg: dict, path: Path) -> dict:
    """Checks an experiment file's contents against ``SCHEMA``: unknown sections and keys, wrong
    types and out-of-range values are errors naming the file and the key. Returns ``cfg``."""
    for name in cfg:
        if name not in SCHEMA:
            raise SweepConfigError(path, name, f"one of the sections {list(SCHEMA)} (unknown section)")
    for name in REQUIRED_SECTIONS:
        if name not in cfg:
            raise SweepConfigError(path, name, "this section (it is required)")
    for name, fields in SCHEMA.items():
        table = cfg.get(name, {})
        if not isinstance(table, dict):
            raise SweepConfigError(path, name, "a table", table)
        for key, value in table.items():
            if key not in fields:
                raise SweepConfigError(
                    path, f"{name}.{key}", f"one of the known keys {sorted(fields)} (unknown key)"
                )
            _check_field(path, f"{name}.{key}", fields[key], value)
        for key, f in fields.items():
            if f.required and key not in table:
                raise SweepConfigError(path, f"{name}.{key}", "this key (it is required)")
    load, gk = cfg["load"], cfg.get("gatekeeper", {})
    if "think" not in load and not ("think_mean_s" in load and "think_max_s" in load):
        raise SweepConfigError(path, "load.think_mean_s", "think_mean_s and think_max_s, or think (required)")
    if load["warmup_s"] >= load["duration_s"]:
        raise SweepConfigError(
            path, "load.warmup_s", f"less than load.duration_s ({load['duration_s']})", load["warmup_s"]
        )
    _check_modes(path, cfg["modes"], load)
    if "capacity" in gk:
        _check_capacity(path, "gatekeeper.capacity", gk["capacity"], ("calibrate", "auto"))
    for key in ("calibrate_min", "calibrate_max"):
        if key in gk:
            _check_capacity(path, f"gatekeeper.{key}", gk[key], ())
    return cfg


def apply_overrides(cfg: dict, overrides: dict) -> dict:
    """The command line's replacements of the file's settings (None: keep the file's). A list of
    browsers replaces every mode's own load points too."""
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "capacity":
            cfg.setdefault("gatekeeper", {})["capacity"] = value
        elif key == "modes":
            cfg.setdefault("modes", {})["list"] = value
        elif key == "browsers":
            cfg.setdefault("load", {})["browsers"] = value
            cfg.setdefault("modes", {}).pop("browsers", None)
        elif key in ("think", "duration_s", "warmup_s", "client_timeout_s"):
            cfg.setdefault("load", {})[key] = value
        elif key in ("items", "customers", "best_sellers_repeat"):
            cfg.setdefault("bookstore", {})[key] = value
        elif key == "max_queue_wait_s":
            # 0 on the command line: no limit.
            if value:
                cfg.setdefault("gatekeeper", {})[key] = value
            else:
                cfg.setdefault("gatekeeper", {}).pop(key, None)
        elif key == "calibrate_with":
            cfg.setdefault("gatekeeper", {})[key] = value
        elif key == "postgres":
            cfg.setdefault("postgres", {}).update({k: v for k, v in value.items() if v is not None})
        else:
            raise TpcwError(f"unknown override {key!r}")
    return cfg


def load_config(path: Path, overrides: dict | None = None) -> dict:
    """Reads an experiment file, applies the command line's ``overrides`` and validates the
    result (``validate``): a bad file stops the sweep before anything starts."""
    path = Path(path)
    try:
        cfg = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SweepConfigError(path, "", f"a readable file ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepConfigError(path, "", f"valid TOML ({e})") from None
    return validate(apply_overrides(cfg, overrides or {}), path)
