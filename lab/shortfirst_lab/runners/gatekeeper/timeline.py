"""What the gatekeeper and the synthetic upstream say while a run goes on: their /metrics
scraped at the end of a run, sampled (`Sampler`) every --sample-ms into a timeline whose
summary says where backend capacity went unused, and once a second into a TPC-W point's
`timeline.csv` of the gate's learned costs (`write_timeline`).
"""

from __future__ import annotations

import contextlib
import csv
import re
import threading
import time
from pathlib import Path

from ...kit import CLK_TCK, fetch_text, parse_prometheus, process_cpu_s, prometheus_series, read_proc_stat


def scrape(admin_port: int) -> dict:
    """Global gauges/counters and per-type estimates from the gatekeeper's /metrics."""
    out: dict = {"estimated_cost_ms": {}}
    for m in parse_prometheus(fetch_text(f"http://127.0.0.1:{admin_port}/metrics", timeout_s=5)):
        if m.name == "gatekeeper_type_estimated_cost_seconds":
            out["estimated_cost_ms"][m.labels["type"]] = m.value * 1e3
        elif m.name in ("gatekeeper_capacity_seconds", "gatekeeper_admitted_total") or m.name.startswith(
            "gatekeeper_rejected_total"
        ):
            out[m.key] = m.value
    return out


def prom(port: int, timeout_s: float = 2) -> dict[str, float]:
    """Every sample of a /metrics page on 127.0.0.1:`port`: `name{labels}` -> value."""
    return prometheus_series(fetch_text(f"http://127.0.0.1:{port}/metrics", timeout_s=timeout_s))


def scrape_upstream_work(port: int) -> dict:
    """The synthetic upstream's work counters (whole run, warm-up included): work served on
    completed requests and work wasted on requests whose caller left mid-service (a client
    timeout closing the connection, through the proxy or directly)."""
    v = prom(port, timeout_s=5)
    done_s = v['synthetic_work_seconds_total{outcome="completed"}']
    wasted_s = v['synthetic_work_seconds_total{outcome="abandoned"}']
    return {
        "completed": int(v['synthetic_requests_total{outcome="completed"}']),
        "abandoned": int(v['synthetic_requests_total{outcome="abandoned"}']),
        "completed_work_s": done_s,
        "abandoned_work_s": wasted_s,
        "wasted_fraction": wasted_s / (done_s + wasted_s) if done_s + wasted_s > 0 else None,
        # Processor-seconds the model was busy, and the part of it spent on completed
        # requests past their cost (held until the model's next event).
        "busy_cpu_s": v.get("synthetic_busy_cpu_seconds_total"),
        "overrun_s": v.get("synthetic_overrun_seconds_total"),
    }


def steal_s() -> float:
    """Seconds of steal summed over all CPUs so far (/proc/stat)."""
    return read_proc_stat()["cpu"]["steal"] / CLK_TCK


def by_type(m: dict[str, float], metric: str) -> dict[str, float]:
    """A per-type metric by type name (the synthetic upstream's `GET /t/` prefix dropped)."""
    pre = metric + '{type="'
    return {k[len(pre) : -2].removeprefix("GET /t/"): v for k, v in m.items() if k.startswith(pre)}


#: Shortest --sample-ms accepted (see main).
MIN_SAMPLE_MS = 10
#: Bound on a `Sampler`'s rows: 1000 s at the shortest period, over a day at a second.
MAX_ROWS = 100_000


class Sampler:
    """Samples, every `period_s` during a run, the gatekeeper's admission state (load,
    capacity, queue, in flight, the head's charge, per type: queued, in flight, estimate)
    and the synthetic upstream's (requests in the model, busy processors, completed work,
    overrun), plus the host's steal, for --sample-ms. Diagnosis of where capacity goes:
    the timeline says, moment by moment, whether the backend had idle processors and what
    the gate was doing then. With `keep`, each row also holds the gatekeeper's series whose
    `name{labels}` it matches, as written (`series`). At most MAX_ROWS rows are kept."""

    def __init__(
        self,
        up_port: int | None,
        admin_port: int | None,
        period_s: float,
        pids: dict[str, int] | None = None,
        keep: re.Pattern | None = None,
    ):
        self.up_port, self.admin_port, self.period_s, self.keep = up_port, admin_port, period_s, keep
        #: Processes whose CPU seconds so far each row records (`cpu_s`, by role).
        self.pids = dict(pids or {})
        self.rows: list[dict] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.t0 = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.rows) < MAX_ROWS:
            t = time.monotonic() - self.t0
            row: dict = {"t_s": t, "steal_s": steal_s()}
            if self.pids:
                row["cpu_s"] = {role: process_cpu_s(pid) for role, pid in self.pids.items()}
            # `up_port` None: a backend without the synthetic upstream's metrics.
            if self.up_port is not None:
                with contextlib.suppress(OSError):
                    u = prom(self.up_port)
                    # .get: an older binary (--bin of a baseline) lacks the newer gauges.
                    row["up"] = {
                        "in_model": u.get("synthetic_in_model", float("nan")),
                        "busy_cpu_s": u.get("synthetic_busy_cpu_seconds_total", float("nan")),
                        "completed_work_s": u['synthetic_work_seconds_total{outcome="completed"}'],
                        "overrun_s": u.get("synthetic_overrun_seconds_total", float("nan")),
                    }
            if self.admin_port is not None:
                with contextlib.suppress(OSError):
                    g = prom(self.admin_port)
                    row["gate"] = {
                        "load_s": g["gatekeeper_load_seconds"],
                        "capacity_s": g["gatekeeper_capacity_seconds"],
                        "queue": g["gatekeeper_queue_length"],
                        "in_flight": g["gatekeeper_in_flight"],
                        "head_cost_s": g.get("gatekeeper_queue_head_cost_seconds", float("nan")),
                        "queued": {k: v for k, v in by_type(g, "gatekeeper_type_queued").items() if v},
                        "in_flight_by_type": {
                            k: v for k, v in by_type(g, "gatekeeper_type_in_flight").items() if v
                        },
                        "estimate_ms": {
                            k: 1e3 * v
                            for k, v in by_type(g, "gatekeeper_type_estimated_cost_seconds").items()
                        },
                        "rejected_queue_wait": g['gatekeeper_rejected_total{reason="queue_wait"}'],
                    }
                    if self.keep is not None:
                        row["series"] = {k: v for k, v in g.items() if self.keep.match(k)}
            self.rows.append(row)
            self.stop.wait(max(0.0, self.period_s - (time.monotonic() - self.t0 - t)))


def timeline_summary(
    rows: list[dict], warmup_s: float, duration_s: float, cpus: int, max_in_flight: int
) -> dict:
    """What the samples in the measurement window say about unused backend capacity.

    Between consecutive samples: the backend's busy processors (busy-CPU counter delta over
    time) and its completed work rate. Per sample: `idle` when fewer than `cpus` requests
    were in the model. For the idle samples, what the gate was doing: nothing waiting
    (`queue_empty`), the head's charge not fitting in capacity - load (`head_blocked`),
    the in-flight cap reached (`in_flight_cap`), or a head that fits (`head_fits`: the gate
    would have admitted it at its next event, so the backend's idleness is momentary)."""
    w = [r for r in rows if warmup_s <= r["t_s"] <= duration_s and "up" in r]
    if len(w) < 2:
        return {}
    span = w[-1]["t_s"] - w[0]["t_s"]
    busy = (w[-1]["up"]["busy_cpu_s"] - w[0]["up"]["busy_cpu_s"]) / span
    work = (w[-1]["up"]["completed_work_s"] - w[0]["up"]["completed_work_s"]) / span
    overrun = (w[-1]["up"]["overrun_s"] - w[0]["up"]["overrun_s"]) / span
    steal = (w[-1]["steal_s"] - w[0]["steal_s"]) / span
    out = {
        "samples": len(w),
        "busy_cpus": busy,
        "completed_work_per_s": work,
        "overrun_per_s": overrun,
        "steal_cpus": steal,
        "mean_in_model": sum(r["up"]["in_model"] for r in w) / len(w),
        "idle_fraction": sum(r["up"]["in_model"] < cpus for r in w) / len(w),
    }
    gw = [r for r in w if "gate" in r]
    if gw:
        idle = [r for r in gw if r["up"]["in_model"] < cpus]
        why = {"queue_empty": 0, "in_flight_cap": 0, "head_blocked": 0, "head_fits": 0}
        for r in idle:
            g = r["gate"]
            if g["queue"] == 0:
                why["queue_empty"] += 1
            elif g["in_flight"] >= max_in_flight:
                why["in_flight_cap"] += 1
            elif g["load_s"] + g["head_cost_s"] > g["capacity_s"] + 1e-9:
                why["head_blocked"] += 1
            else:
                why["head_fits"] += 1

        def mean(v):
            return sum(v) / len(v) if v else None

        out.update(
            {
                "mean_load_over_capacity": mean([r["gate"]["load_s"] / r["gate"]["capacity_s"] for r in gw]),
                "mean_queue": mean([r["gate"]["queue"] for r in gw]),
                "mean_in_flight": mean([r["gate"]["in_flight"] for r in gw]),
                "idle_samples_by_gate_state": why,
                "idle_mean_load_over_capacity": mean(
                    [r["gate"]["load_s"] / r["gate"]["capacity_s"] for r in idle]
                ),
                "idle_mean_in_flight": mean([r["gate"]["in_flight"] for r in idle]),
                "idle_mean_in_model": mean([r["up"]["in_model"] for r in idle]),
                "idle_mean_head_cost_ms": mean([1e3 * r["gate"]["head_cost_s"] for r in idle]),
                "rejected_queue_wait_in_window": gw[-1]["gate"]["rejected_queue_wait"]
                - gw[0]["gate"]["rejected_queue_wait"],
            }
        )
    return out


#: The series a TPC-W point's `timeline.csv` keeps: the gate's gauges and counters, and each
#: type's learned cost (what SJF orders by; the end-of-run value alone is the drained tail's).
TIMELINE_SERIES = re.compile(
    r"^(gatekeeper_(?:load_seconds|capacity_seconds|queue_length|in_flight|admitted_total"
    r"|cancelled_while_queued_total)|gatekeeper_type_estimated_cost_seconds)"
    r"(?:\{type=\"((?:[^\"\\]|\\.)*)\"\})?$"
)


def write_timeline(rows: list[dict], path: Path) -> None:
    """A `Sampler`'s kept series (`keep=TIMELINE_SERIES`) as ``t_s,series,type,value`` rows,
    ``t_s`` from the start of sampling; written to a temporary name and renamed."""
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "series", "type", "value"])
        for row in rows:
            for key, value in row.get("series", {}).items():
                m = TIMELINE_SERIES.match(key)
                w.writerow([f"{row['t_s']:.3f}", m.group(1), m.group(2) or "", value])
    tmp.rename(path)
