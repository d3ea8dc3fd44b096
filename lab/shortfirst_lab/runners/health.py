"""Server health during a run: a 1 Hz sampler of `Testbed.health_sample()` and the
flattening and naming of what it returns (rows kept in memory, written as health.csv)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..kit import write_atomic

HEALTH_PERIOD_S = 1.0


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}." if not isinstance(v, dict | list) else f"{prefix}{k}."))
        return {k.rstrip("."): v for k, v in out.items()}
    if isinstance(d, list):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}{i}."))
        return out
    return {prefix: d}


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Non-zero increases of cumulative counters (gauges like Tcp.CurrEstab are skipped)."""
    skip = {"Tcp.CurrEstab", "Tcp.RtoAlgorithm", "Tcp.RtoMin", "Tcp.RtoMax", "Tcp.MaxConn"}
    return {
        k: after[k] - before.get(k, 0)
        for k in sorted(after)
        if k not in skip and after[k] != before.get(k, 0)
    }


# Names under which the testbed may report the counters the analysis summarises.
_HEALTH_ALIASES = {
    "open_connections": ("open_connections", "connections_open", "established", "open"),
    "listen_overflows": ("listen_overflows", "ListenOverflows", "TcpExtListenOverflows"),
    "listen_drops": ("listen_drops", "ListenDrops", "TcpExtListenDrops"),
}


def normalise_health(sample: dict[str, Any]) -> dict[str, Any]:
    """Flatten a `Testbed.health_sample()` dict and name the summarised counters canonically."""
    flat = _flatten(sample)
    out = {k: v for k, v in flat.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    for canon, names in _HEALTH_ALIASES.items():
        if canon in out:
            continue
        for key, v in list(out.items()):
            if key.split(".")[-1] in names:
                out[canon] = v
                break
    return out


class HealthSampler(threading.Thread):
    """Samples `sample()` every HEALTH_PERIOD_S until stopped; rows kept in memory.

    Bounded: one row per second of run time (the run itself is bounded by duration + drain).
    """

    def __init__(self, sample: Callable[[], dict[str, Any]], t0: float):
        super().__init__(daemon=True, name="health-sampler")
        self.sample = sample
        self.t0 = t0
        self.rows: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        next_t = time.monotonic()
        while not self._stop_evt.is_set():
            row: dict[str, Any] = {"t_s": round(time.monotonic() - self.t0, 3)}
            try:
                sample = normalise_health(self.sample())
                sample.pop("time_s", None)  # the testbed's monotonic stamp; t_s is ours
                row.update(sample)
            except Exception as e:  # noqa: BLE001 - a failed sample is logged, the run goes on
                if len(self.errors) < 20:
                    self.errors.append(f"t={row['t_s']}: {type(e).__name__}: {e}")
            self.rows.append(row)
            next_t += HEALTH_PERIOD_S
            self._stop_evt.wait(max(0.0, next_t - time.monotonic()))

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(timeout=10)

    def latest(self, key: str) -> Any:
        return self.rows[-1].get(key) if self.rows else None

    def write(self, path: Path) -> None:
        cols: list[str] = ["t_s"]
        for r in self.rows:
            cols.extend(k for k in r if k not in cols)
        write_atomic(path, pd.DataFrame(self.rows, columns=cols).to_csv(index=False))
