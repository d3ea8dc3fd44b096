"""Gatekeeper on the TPC-W bookstore: emulated browsers → (gatekeeper) → bookstore → PostgreSQL.

One module a job: ``config`` (the experiment file's schema, pages, binaries), ``database`` (the
private PostgreSQL and its counters), ``services`` (bookstore, gatekeeper, browsers, the learned-cost
sampler), ``calibration`` (the gatekeeper's capacity), ``measure`` (a point's figures and the
targets), ``join`` (the browsers' and the bookstore's logs joined per request), ``sweep`` (running
an experiment file), ``report`` (figures and tables), ``cli`` (``python -m shortfirst_lab tpcw``).
The names below are the package's API, used by the lab's tests and scripts.
"""

from ...spec.tpcw import SweepConfigError, load_config, parse_capacity_us, validate
from .calibration import calibrate, calibrate_with_browsers, choose_capacity
from .cli import main
from .config import (
    CALIBRATION_MIX,
    PAGES,
    PATH_TO_CODE,
    SESSION_FILE,
    Binaries,
    PgSettings,
    TpcwError,
    best_sellers_repeat_of,
    browsers_for,
    think_max_s,
)
from .database import Postgres, generate, postgres, shop
from .join import apply_join, join_requests, timeline_stats
from .measure import analyze, cpu_delta, cpu_times, full_view, parse_metrics, targets, type_to_code
from .report import report
from .services import Timeline, bookstore, gatekeeper, run_load
from .sweep import run_point, sweep

__all__ = [
    "CALIBRATION_MIX",
    "PAGES",
    "PATH_TO_CODE",
    "SESSION_FILE",
    "Binaries",
    "PgSettings",
    "Postgres",
    "SweepConfigError",
    "Timeline",
    "TpcwError",
    "analyze",
    "apply_join",
    "best_sellers_repeat_of",
    "bookstore",
    "browsers_for",
    "calibrate",
    "calibrate_with_browsers",
    "choose_capacity",
    "cpu_delta",
    "cpu_times",
    "full_view",
    "gatekeeper",
    "generate",
    "join_requests",
    "load_config",
    "main",
    "parse_capacity_us",
    "parse_metrics",
    "postgres",
    "report",
    "run_load",
    "run_point",
    "shop",
    "sweep",
    "targets",
    "think_max_s",
    "timeline_stats",
    "type_to_code",
    "validate",
]
