"""The WAN side of an experiment run: which client ids form which group, where
each group's connections come from, the RTT measured on each group's path
before the load starts, and ``groups.json``.

A run with client groups (``[[client.groups]]``) or on a path of a sweep
(``wan.paths``: one group ``all`` holding every client) writes::

    runs/<run>/groups.json        {"groups": [{"name", "rtt_ms", "jitter_ms", "loss",
                                   "clients": [ids as in requests.csv], "address",
                                   "measured": {"rtt_ms", "rtt_samples", "loss_down",
                                   "loss_up", ...}}], "emulator": {...}}
    runs/<run>/source_addrs.csv   client,addr: what `shortfirst load --source-addrs` binds
    runs/<run>/netem.json         the emulator's final counters, the TUN's, and the
                                  conservation check (every packet out or counted dropped)
    runs/<run>/netem.toml         the emulator's configuration

Measured loss is the emulator's own count of random drops over what it read
per direction (the emulator is the only place that drops by design; any other
drop is a separate counter in netem.json). Measured RTT is the median of the
kernel's handshake RTT sample (``tcpi_rtt`` right after connect: SYN to
SYN-ACK, free of the probe's own wake-up delay) over TCP connects from the
group's address to the server, taken while the server is idle, just before
the load starts; ``connect_ms`` is the wall-clock median beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from ..kit import write_atomic, write_json
from ..spec.experiment import Experiment, RunSpec
from ..testbed.bed import GroupPath

#: TCP connects per group to measure its RTT before the load (the median is kept).
RTT_PROBES = 9
#: Seconds one group's RTT probe may take (connects are sequential; a lost SYN costs 1 s).
RTT_PROBE_TIMEOUT_S = 60.0


def run_groups(exp: Experiment, spec: RunSpec) -> list[tuple[GroupPath, list[int]]] | None:
    """The groups of one run with their client ids, or None for a LAN run.

    Ids are given to the groups in file order (group 0 gets 0..n0-1, ...); the generator
    assigns sessions to clients round robin, so each group carries its share of requests.
    """
    if exp.wan is None:
        return None
    if spec.path is not None:
        p = spec.path
        return [(GroupPath("all", p.rtt_ms, p.jitter_ms, p.loss), list(range(exp.client.clients)))]
    out, first = [], 0
    for g in exp.client.groups:
        out.append(
            (
                GroupPath(g.name, g.path.rtt_ms, g.path.jitter_ms, g.path.loss),
                list(range(first, first + g.clients)),
            )
        )
        first += g.clients
    return out


def source_addrs_flags(
    rdir: Path, groups: list[tuple[GroupPath, list[int]]], addrs: dict[str, str]
) -> list[str]:
    """Writes `rdir/source_addrs.csv` (`client,addr` for every client id; no `*` row: an
    unlisted client is an error) and returns the generator's flags that bind each client's
    connections to its group's address."""
    rows = ["client,addr"]
    for g, ids in groups:
        rows.extend(f"{c},{addrs[g.name]}" for c in ids)
    path = rdir / "source_addrs.csv"
    write_atomic(path, "\n".join(rows) + "\n")
    return ["--source-addrs", f"file:{path}"]


def measure_rtts(tb: Any, port: int) -> dict[str, dict[str, Any]]:
    """Per group: RTT_PROBES sequential TCP connects from its address to the server."""
    out: dict[str, dict[str, Any]] = {}
    for name, addr in tb.group_addrs.items():
        argv = [sys.executable, "-m", "shortfirst_lab", "probe", "connect-times"]
        argv += [tb.server_addr, str(port), addr, str(RTT_PROBES), "1", "0.02"]
        try:
            r = tb.client_run(argv, capture_output=True, text=True, timeout=RTT_PROBE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - recorded; the run itself goes on
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        if r.returncode != 0:
            out[name] = {"error": r.stderr.strip()[-500:]}
            continue
        got = json.loads(r.stdout)
        out[name] = {
            "rtt_ms": statistics.median(got["kernel_rtt_ms"]),
            "rtt_samples": got["kernel_rtt_ms"],
            "connect_ms": statistics.median(got["rtt_ms"]),
        }
    return out


def measured_loss(stats: dict[str, Any] | None, group: str) -> dict[str, Any]:
    """Random drops over packets read, per direction, from the emulator's counters."""
    out: dict[str, Any] = {}
    for line in (stats or {}).get("lines", []):
        if line.get("group") != group:
            continue
        rx = line.get("rx_packets", 0)
        lost = line.get("dropped", {}).get("loss", 0)
        d = line.get("direction")
        out[f"loss_{d}"] = lost / rx if rx else None
        out[f"packets_{d}"] = rx
    return out


def groups_record(
    groups: list[tuple[GroupPath, list[int]]],
    addrs: dict[str, str],
    rtts: dict[str, dict[str, Any]],
    netem: dict[str, Any] | None,
) -> dict[str, Any]:
    """The content of groups.json."""
    stats = netem["netem"] if netem else None
    rows = []
    for g, ids in groups:
        measured = {**rtts.get(g.name, {}), **measured_loss(stats, g.name)}
        rows.append(
            {
                "name": g.name,
                "rtt_ms": g.rtt_ms,
                "jitter_ms": g.jitter_ms,
                "loss": g.loss,
                "clients": ids,
                "address": addrs.get(g.name),
                "measured": measured,
            }
        )
    emulator = {}
    if netem:
        emulator = {
            "conservation_violations": netem["conservation_violations"],
            "tun_tx_dropped": netem["tun"].get("tx_dropped"),
            "dropped": stats.get("totals", {}).get("dropped") if stats else None,
        }
    return {"groups": rows, "emulator": emulator}


def write_groups(rdir: Path, record: dict[str, Any]) -> None:
    write_json(rdir / "groups.json", record)
