"""The synthetic TPC-W-like upstream (`shortfirst gatekeeper synthetic-upstream`) as a
backend: its settings, the paper's Table 1 costs of its request types, the mix it writes.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .... import commands
from .base import Backend

#: The most expensive type with a usable sample (admin_response is 0.09% of the mix).
COSTLIEST = "best_sellers"


def read_mix(path: Path) -> list[tuple[str, float]]:
    with open(path) as f:
        return [(r["path"], float(r["weight"])) for r in csv.DictReader(f)]


# The paper's Table 1 no-load costs (ms), as in crates/gatekeeper/src/synthetic.rs.
TABLE1_MS = {
    "admin_request": 2.84,
    "admin_response": 2476.75,
    "best_sellers": 1205.01,
    "buy_confirm": 15.71,
    "buy_request": 5.26,
    "execute_search": 73.27,
    "home": 1.83,
    "new_products": 13.82,
    "order_display": 7.43,
    "order_inquiry": 0.75,
    "product_detail": 0.91,
    "search_request": 0.22,
    "shopping_cart": 0.34,
}


def type_cost_ms(path: str, scale: float) -> float:
    name = path.rsplit("/", 1)[-1]
    return min(max(TABLE1_MS[name], 1.0), 2000.0) * scale if name in TABLE1_MS else 0.0


@dataclass
class SyntheticBackend(Backend):
    """Costs 1 ms .. 2 s times `scale` in the proportions of the paper's Table 1, on `cpus`
    processors at full speed; beyond `slots` requests at once it thrashes, each further
    request slowing all by `thrash`. Every start writes its request mix to `mix`. The
    gatekeeper classifies its requests by path, its default."""

    binary: str
    scale: float
    cpus: int
    slots: int
    thrash: float
    mix: Path
    name = "synthetic"

    def argv(self, port: int) -> list[str]:
        return commands.synthetic_upstream(
            self.binary,
            listen=f"127.0.0.1:{port}",
            scale=self.scale,
            cpus=self.cpus,
            slots=self.slots,
            thrash=self.thrash,
            write_mix=self.mix,
        )

    def calibration_mix(self) -> dict[str, Any]:
        return {"mix": self.mix}

    def type_of(self, path: str) -> str:
        return path.rsplit("/", 1)[-1]

    def cost_ms(self, path: str) -> float:
        """A request's base cost: its type's Table 1 cost times `scale`."""
        return type_cost_ms(path, self.scale)
