"""What a sweep is made of besides the bookstore (`backends.bookstore`): the binaries and the
settings of the experiment file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ....kit import REPO, bookstore_binary, shortfirst_binary
from ....spec.tpcw import BEST_SELLERS_REPEAT_MAX
from ..backends.base import GatekeeperError


@dataclass
class Binaries:
    shortfirst: Path
    bookstore: Path

    @classmethod
    def default(cls, profile: str | None = None) -> Binaries:
        """Those of cargo profile directory ``target/PROFILE``; without one, those the lab
        drives (`kit.shortfirst_binary`: ``$SHORTFIRST_BIN`` or the release build)."""
        if profile is None:
            return cls(shortfirst_binary(), bookstore_binary())
        return cls(REPO / "target" / profile / "shortfirst", REPO / "target" / profile / "bookstore")

    def check(self) -> None:
        for b in (self.shortfirst, self.bookstore):
            if not b.exists():
                raise GatekeeperError(f"{b} not built (make build bookstore-build)")


def best_sellers_repeat_of(bookstore_cfg: dict) -> int | None:
    """``[bookstore] best_sellers_repeat`` (runs of Best Sellers' query per request, a declared
    deviation from TPC-W), validated; None if unset (once, as TPC-W)."""
    value = bookstore_cfg.get("best_sellers_repeat")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BEST_SELLERS_REPEAT_MAX:
        raise GatekeeperError(
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
