"""What a response costs on the wire, fitted to a run's own byte counts.

The shaped uplink carries more than response bodies: each response's HTTP head, 66 bytes of
Ethernet (14) + IPv4 (20) + TCP with timestamps (32) headers per segment of at most one MSS
(1448 bytes), and per connection the server's SYN-ACK, ACKs and FIN (plus whatever it
retransmits). The wire cost of a response with a body of ``size`` bytes is modelled as::

    wire(size) = size + H + ceil((size + H) / MSS) · O + C

H, the head, is measured from the generator's summary (``wire_bytes_received −
bytes_received`` over ``completed``); O is the per-segment header; C, the per-connection
control bytes, is calibrated so that Σ wire(size) over the run's requests equals the qdisc's
own byte count (``uplink.json``'s total, else the last ``band_bytes.*`` sample of
``health.csv``). The fit (model bytes against counted bytes, and the wire's overhead over the
payload) goes into the run's metrics (``models.wire``); `idealsim` replays the run with
``wire(size)`` as each request's service for the wire-accurate ideal (see `models`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

MSS_BYTES = 1448
#: Ethernet 14 + IPv4 20 + TCP 20 with the 12-byte timestamp option.
SEGMENT_HEADER_BYTES = 66


@dataclass(frozen=True)
class WireModel:
    """wire(size) = size + H + ceil((size + H) / MSS) · O + C (module doc)."""

    head_bytes: float
    control_bytes: float = 0.0
    segment_header_bytes: int = SEGMENT_HEADER_BYTES
    mss_bytes: int = MSS_BYTES

    def data_cost(self, sizes: Any) -> np.ndarray:
        """Per response: body, head and segment headers (no per-connection bytes)."""
        s = np.asarray(sizes, dtype=float) + self.head_bytes
        return s + np.ceil(s / self.mss_bytes) * self.segment_header_bytes

    def cost(self, sizes: Any) -> np.ndarray:
        """Wire bytes per response, float."""
        return self.data_cost(sizes) + self.control_bytes

    def cost_bytes(self, sizes: Any) -> np.ndarray:
        """Wire bytes per response rounded to whole bytes (what a trace's `size_bytes` holds)."""
        return np.rint(self.cost(sizes)).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "head_bytes": self.head_bytes,
            "control_bytes": self.control_bytes,
            "segment_header_bytes": self.segment_header_bytes,
            "mss_bytes": self.mss_bytes,
        }


def head_bytes(generator: dict[str, Any]) -> float | None:
    """Mean response-head bytes from the generator's summary, or None without its counts."""
    wire, body, n = (generator.get(k) for k in ("wire_bytes_received", "bytes_received", "completed"))
    if wire is None or body is None or not n:
        return None
    return max(0.0, (float(wire) - float(body)) / float(n))


def counted_bytes(run_dir: Path) -> tuple[int | None, str | None]:
    """The bytes the shaped uplink sent over the whole run and where the count comes from."""
    up = run_dir / "uplink.json"
    if up.exists():
        rec = json.loads(up.read_text())
        total = (rec.get("total") or {}).get("bytes")
        if total is None and rec.get("bands"):
            total = sum(int(b.get("bytes", 0)) for b in rec["bands"])
        if total is not None:
            return int(total), "uplink.json"
    hp = run_dir / "health.csv"
    if hp.exists():
        try:
            h = pd.read_csv(hp)
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            return None, None
        cols = [c for c in h.columns if c.startswith("band_bytes.")]
        if cols and len(h):
            return int(h[cols].fillna(0).iloc[-1].sum()), "health.csv"
    return None, None


def calibrate(sizes: Any, head: float, counted: int | None) -> WireModel:
    """The model with C such that Σ wire(size) = counted (C = 0 without a count; never < 0)."""
    sizes = np.asarray(sizes, dtype=float)
    base = WireModel(head)
    if counted is None or sizes.size == 0:
        return base
    control = (float(counted) - float(base.data_cost(sizes).sum())) / sizes.size
    return WireModel(head, max(0.0, control))


def fit_run(
    run_dir: Path, sizes: Any, generator: dict[str, Any] | None = None
) -> tuple[WireModel, dict[str, Any]]:
    """The run's wire model from its raw logs, with the fit: `sizes` are every request's body
    bytes (every connection the run opened, not just the window's)."""
    if generator is None:
        p = run_dir / "summary.json"
        generator = json.loads(p.read_text()) if p.exists() else {}
    sizes = np.asarray(sizes, dtype=float)
    head = head_bytes(generator)
    counted, source = counted_bytes(run_dir)
    model = calibrate(sizes, head if head is not None else 0.0, counted)
    model_total = float(model.cost(sizes).sum())
    payload = float(sizes.sum())
    fit = model.to_dict() | {
        "head_source": "summary.json" if head is not None else None,
        "counted_bytes": counted,
        "counted_source": source,
        "model_bytes": model_total,
        "model_over_counted": model_total / counted if counted else None,
        "payload_bytes": payload,
        "wire_over_payload": model_total / payload if payload else None,
        "requests": int(sizes.size),
    }
    return model, fit
