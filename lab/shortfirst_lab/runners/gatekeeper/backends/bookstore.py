"""The TPC-W bookstore (`examples/bookstore`, over the private PostgreSQL of `postgres`) as a
backend: its pages and their codes, the shopping mix the emulated browsers walk and the mix
`shortfirst gatekeeper calibrate` offers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .... import commands
from ....kit import REPO
from .base import Backend

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


@dataclass
class BookstoreBackend(Backend):
    """`bookstore serve` on `db` with a pool of `pool` connections. With `request_log`, one
    row per request there (complete once the backend has stopped); `best_sellers_repeat`:
    runs of Best Sellers' query per request (None: once, as TPC-W); `route_comments`: tag every
    statement with its interaction's route, for a gatekeeper at the database tier. The
    gatekeeper in front of it classifies its requests by path, its default."""

    binary: Path
    db: str
    pool: int
    request_log: Path | None = None
    best_sellers_repeat: int | None = None
    route_comments: bool = False
    name = "bookstore"
    ready_path = "/healthz"

    def argv(self, port: int) -> list[str]:
        return commands.bookstore_serve(
            self.binary,
            db=self.db,
            listen=f"127.0.0.1:{port}",
            pool=self.pool,
            request_log=self.request_log,
            best_sellers_repeat=self.best_sellers_repeat,
            route_comments=self.route_comments,
        )

    def calibration_mix(self) -> dict[str, Any]:
        return {"paths": [(PAGES[code][0], w) for code, w in CALIBRATION_MIX.items()]}

    def type_of(self, path: str) -> str:
        return PATH_TO_CODE.get(path.split("?", 1)[0], "OTHER")
