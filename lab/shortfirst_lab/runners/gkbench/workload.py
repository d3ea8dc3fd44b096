"""The synthetic upstream's request types and the load the bench offers it: the paper's
Table 1 costs, the upstream's mix, Poisson traces.
"""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

POLICIES = ["fifo", "sjf", "sjf-aging:1", "sjf-aging:2", "sjf-aging:5"]


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


def write_trace(path: Path, mix, rate_per_s: float, duration_s: float, seed: int) -> int:
    """Poisson arrivals at `rate_per_s`, paths drawn from the mix. Returns the row count."""
    rng = random.Random(seed)
    paths = [p for p, _ in mix]
    weights = [w for _, w in mix]
    t, n = 0.0, 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write("time_s,path,size_bytes\n")
        while True:
            t += rng.expovariate(rate_per_s)
            if t >= duration_s:
                break
            f.write(f"{t:.6f},{rng.choices(paths, weights)[0]},0\n")
            n += 1
    os.replace(tmp, path)
    return n


def factors(spec: str) -> list[float]:
    """`--closed-factors` / `--open-factors`: comma-separated multiples; empty = none."""
    return [float(x) for x in spec.split(",") if x.strip()]
