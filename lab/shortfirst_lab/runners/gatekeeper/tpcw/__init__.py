"""Gatekeeper on the TPC-W bookstore: emulated browsers → (gatekeeper) → bookstore → PostgreSQL.

The bookstore and its database are backends of the harness (`backends.bookstore`,
`backends.postgres`), run by its runner (`run`). One module a job here: ``config`` (binaries and
the experiment file's settings), ``calibration`` (the gatekeeper's capacity), ``measure`` (a
point's figures and the targets), ``join`` (the browsers' and the bookstore's logs joined per
request), ``sweep`` (running an experiment file), ``report`` (figures and tables), ``cli``
(``python -m shortfirst_lab tpcw``). The names below are the package's API, used by the lab's
tests and scripts.
"""

from ....kit import cpu_times
from ....spec.tpcw import Mode, SweepConfigError, load_config, parse_capacity_us, parse_mode, validate
from ..backends.base import GatekeeperError, serve
from ..backends.bookstore import CALIBRATION_MIX, PAGES, PATH_TO_CODE, SESSION_FILE, BookstoreBackend
from ..backends.postgres import PgSettings, Postgres, generate, postgres, shop
from .calibration import calibrate, calibrate_with_browsers, choose_capacity
from .cli import main
from .config import Binaries, best_sellers_repeat_of, browsers_for, think_max_s
from .join import apply_join, join_requests, timeline_stats
from .measure import analyze, cpu_delta, full_view, parse_metrics, targets, type_to_code
from .report import report
from .sweep import database_front, run_point, sweep

__all__ = [
    "CALIBRATION_MIX",
    "PAGES",
    "PATH_TO_CODE",
    "SESSION_FILE",
    "Binaries",
    "BookstoreBackend",
    "GatekeeperError",
    "Mode",
    "PgSettings",
    "Postgres",
    "SweepConfigError",
    "analyze",
    "apply_join",
    "best_sellers_repeat_of",
    "browsers_for",
    "calibrate",
    "calibrate_with_browsers",
    "choose_capacity",
    "cpu_delta",
    "cpu_times",
    "database_front",
    "full_view",
    "generate",
    "join_requests",
    "load_config",
    "main",
    "parse_capacity_us",
    "parse_metrics",
    "parse_mode",
    "postgres",
    "report",
    "run_point",
    "serve",
    "shop",
    "sweep",
    "targets",
    "think_max_s",
    "timeline_stats",
    "type_to_code",
    "validate",
]
