"""What a sweep is made of: the bookstore's pages and mix, the binaries, the settings of the
experiment file and the errors that stop a sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ...kit import REPO, LabError
from ...spec.tpcw import BEST_SELLERS_REPEAT_MAX

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
