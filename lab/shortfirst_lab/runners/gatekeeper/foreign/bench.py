"""The gatekeeper in front of backends the project did not write (`make
bench-gatekeeper-foreign`): for each backend (an experiment file each), its per-type cost
alone, its peak work rate (direct, closed loops), `shortfirst gatekeeper calibrate`, then
every mode (direct, fifo, sjf, sjf-aging:X) under open and closed load at about twice the
peak, each run on a freshly started backend.

Work is measured as in the issue that asked for it: a completion counts its type's cost
alone (median of sequential requests on the idle backend), so the work rate is the
backend's useful busy time per second; its ratio to the peak is what admission control
keeps or loses. Response times count a request that timed out at the client timeout.

With `--pin` (the default when a `python -m shortfirst_lab cpus` reservation exists) the backend runs
on the reserved CPU through `python -m shortfirst_lab cpus run`. Run under that wrapper as a
whole (the experiment file says how), the gatekeeper and the load generator share the CPU
with the backend: a few percent of it, and no wait behind the other CPU's jobs.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from ....kit import provenance, shortfirst_binary, write_json
from ....spec.foreign import Settings
from ....spec.schema import read_toml
from ..backends.base import GatekeeperError, Served, serve
from ..backends.foreign import ForeignBackend, prepare
from ..run import calibrate, drive, front, pinned_prefix, write_trace
from ..summary import summarize
from ..timeline import Sampler
from .verdict import checks, table

#: Sequential requests per type when measuring its cost alone (cheap, costly).
ALONE_SAMPLES = (40, 6)
#: The gate's timeline: its admin metrics sampled this often during a gatekeeper run.
SAMPLE_S = 0.5


class Point:
    """One backend's runs: the backend (`backends.foreign`), the gatekeeper binary and the
    scratch directory."""

    def __init__(self, s: Settings, backend: ForeignBackend, binary: str, work: Path):
        self.s, self.backend, self.bin, self.work = s, backend, binary, work
        self.counter = 0
        self.cost_ms: dict[str, float] = {}
        #: Per gatekeeper run (tag): the gate's samples (`timeline.Sampler` rows).
        self.timelines: dict[str, list[dict]] = {}

    def start(self) -> contextlib.AbstractContextManager[Served]:
        """The backend, freshly started (`backends.base.serve`)."""
        self.counter += 1
        return serve(self.backend, self.work / f"backend-{self.counter}.log")

    def measure_alone(self, url: str) -> None:
        """Each type's cost alone: the median of sequential requests on the idle backend."""
        rng = random.Random(self.s.seed)
        cheap = min(self.backend.types, key=lambda t: -t.weight)
        for t in self.backend.types:
            n = ALONE_SAMPLES[0] if t is cheap else ALONE_SAMPLES[1]
            times = []
            for _ in range(n + 1):
                t0 = time.perf_counter()
                with urllib.request.urlopen(url + t.sample(rng, self.backend.rows), timeout=60) as r:
                    r.read()
                times.append(1e3 * (time.perf_counter() - t0))
            self.cost_ms[t.name] = statistics.median(times[1:])  # the first warms caches

    def mean_cost_ms(self) -> float:
        total = sum(t.weight for t in self.backend.types)
        return sum(t.weight * self.cost_ms[t.name] for t in self.backend.types) / total

    def trace(self, path: Path, rate_per_s: float, duration_s: float, seed: int | None = None) -> None:
        """Poisson arrivals at `rate_per_s`, each a sampled path of a type drawn by weight
        (`seed`: the experiment's unless given)."""
        types = list(self.backend.types)
        weights = [t.weight for t in types]

        def draw(rng: random.Random) -> str:
            return rng.choices(types, weights)[0].sample(rng, self.backend.rows)

        write_trace(path, draw, rate_per_s, duration_s, self.s.seed if seed is None else seed)

    def load(self, url: str, model: str, trace: Path, tag: str, duration_s: float) -> tuple[Path, float]:
        out = self.work / tag
        kw = {"trace": trace, "model": model, "seed": self.s.seed}
        wall = drive(self.bin, url, out, duration_s=duration_s, timeout_s=self.s.timeout_s, **kw)
        return out, wall

    def summary(self, out: Path, warmup_s: float, duration_s: float, wall_s: float) -> dict:
        def cost(path: str) -> float:
            return self.cost_ms.get(self.backend.type_of(path), 0.0)

        s = summarize(out, warmup_s, duration_s, wall_s, self.s.timeout_s, cost, self.backend.type_of)
        for name, t in s["per_type"].items():
            t["completed_fraction"] = t["completed"] / t["n"] if t["n"] else None
            t["cost_alone_ms"] = self.cost_ms.get(name)
        return s

    def peak(self) -> dict:
        """The backend's peak work rate alone, under closed loops without think time: up
        the ladder of client counts, per count the median of `peak_repeats` runs (each on
        its own trace), until the ladder ends or the medians have clearly fallen past the
        best (`ladder_done`); then the best client count. The best single run would be
        the noise's maximum: a window of a few seconds holds a few dozen costly requests,
        and which of them complete in it moves the work rate by about 10% run to run."""
        traces = []
        for repeat in range(self.s.peak_repeats):
            traces.append(self.work / f"peak-trace-{repeat}.csv")
            self.trace(traces[-1], 1000.0, 3600.0, seed=self.s.seed + repeat)
        runs: list[dict] = []
        medians: list[float] = []
        for clients in self.s.peak_clients:
            for repeat, trace in enumerate(traces):
                with self.start() as be:
                    out, wall = self.load(
                        be.url, f"closed:{clients}", trace, f"peak-{clients}-{repeat}", self.s.peak_s
                    )
                s = self.summary(out, self.s.peak_warmup_s, self.s.peak_s, wall)
                runs.append(
                    {
                        "clients": clients,
                        "repeat": repeat,
                        "work_per_s": s["work_per_s"],
                        "throughput_per_s": s["throughput_per_s"],
                    }
                )
                print(
                    f"  peak {clients} clients #{repeat}: {s['work_per_s']:.3f} work/s",
                    file=sys.stderr,
                    flush=True,
                )
            medians.append(statistics.median(r["work_per_s"] for r in runs if r["clients"] == clients))
            if ladder_done(medians, self.s.peak_stop_after, self.s.peak_stop_drop):
                break
        return peak_of(runs)

    def calibrate(self, url: str) -> dict:
        c = self.s.calibrate
        return calibrate(
            self.bin,
            url,
            self.work / "calibration.json",
            clients=c["clients"],
            warmup=c["warmup"],
            measure=c["measure"],
            min_capacity=c["min"],
            max_capacity=c["max"],
            max_trials=c["max_trials"],
            refine_steps=c["refine_steps"],
            repeats=c["repeats"],
            **self.backend.calibration_mix(random.Random(self.s.seed)),
            **self.backend.gate_flags(),
        )

    def run(self, mode: str, model: str, capacity_us: int, peak: dict, patience: str | None = None) -> dict:
        """One run of `mode` (direct, or a gatekeeper policy with the `patience` rule)."""
        s = self.s
        peak_rps = peak["work_per_s"] / (self.mean_cost_ms() / 1e3)
        rate = s.load_factor * peak_rps
        if model == "open":
            trace = self.work / "open-trace.csv"
            if not trace.exists():
                self.trace(trace, rate, s.duration_s)
            load_model, users = "open", None
        else:
            trace = self.work / "closed-trace.csv"
            if not trace.exists():
                self.trace(trace, 1000.0, 4 * s.duration_s)
            users = max(1, round(rate * s.think_s))
            load_model = f"closed:{users},think=exp:{s.think_s}"
        tag = f"{model}-{run_label(mode, patience).replace(':', '-').replace(' ', '-')}"
        flags = {
            "capacity": f"{capacity_us}us",
            "max_queue_wait_s": s.max_queue_wait_s,
            "max_wait_s": s.max_wait_s,
            "overdue_share": s.overdue_share,
            "patience": patience,
            **self.backend.gate_flags(),
        }
        with (
            self.start() as be,
            front(self.bin, be.url, mode, self.work / f"gatekeeper-{tag}.log", **flags) as g,
        ):
            pids = {"backend": be.pid} | ({} if g.pid is None else {"gatekeeper": g.pid})
            with Sampler(None, g.admin_port, SAMPLE_S, pids=pids) as sampler:
                out, wall = self.load(g.url, load_model, trace, tag, s.duration_s)
            self.timelines[tag] = sampler.rows
        r = self.summary(out, s.warmup_s, s.duration_s, wall)
        r["gate"] = gate_summary(self.timelines.get(tag, []), s.warmup_s, s.duration_s)
        r["cpu"] = cpu_summary(self.timelines.get(tag, []), s.warmup_s, s.duration_s, r["work_per_s"])
        r.update(
            {
                "mode": mode,
                "patience": patience,
                "model": model,
                "rate_per_s": rate if model == "open" else None,
                "users": users,
            }
        )
        r["work_over_peak"] = r["work_per_s"] / peak["work_per_s"] if peak["work_per_s"] else None
        if model == "closed" and r["mean_response_ms"] is not None:
            r["response_time_law"] = response_time_law(
                users, r["requests"] / (s.duration_s - s.warmup_s), r["mean_response_ms"] / 1e3, s.think_s
            )
        r.pop("littles_law", None) if model == "open" else None
        mean = r["mean_response_ms"] or float("nan")
        print(
            f"  {tag:<28} {r['throughput_per_s']:7.1f} req/s  {r['work_over_peak']:.2f} of peak  "
            f"mean {mean:8.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        return r


def run_label(mode: str, patience: str | None) -> str:
    """The key of a run in the summary: `direct`, or the policy and its patience rule
    (`sjf patience=learn`)."""
    return mode if mode == "direct" else f"{mode} patience={patience}"


def response_time_law(users: int, requests_per_s: float, mean_response_s: float, think_s: float) -> dict:
    """A closed loop's interactive response time law, R = N / X − Z: N users, X requests
    finished per second (errors included), Z the mean think time. With every request
    answered, X is the backend's work rate over the mean cost of the mix the users draw,
    the same under every policy that keeps the work rate and completes each type as often;
    so is R. A policy's lower mean in a saturated closed loop comes from a higher work rate
    or from completing fewer costly requests (their users leave the loop while they wait)."""
    return {
        "users": users,
        "requests_per_s": requests_per_s,
        "predicted_mean_response_s": users / requests_per_s - think_s if requests_per_s else None,
        "measured_mean_response_s": mean_response_s,
    }


def ladder_done(medians: list[float], stop_after: int, stop_drop: float) -> bool:
    """Whether the peak ladder may stop: its last `stop_after` medians (one per client count,
    in ladder order) are all below (1 - `stop_drop`) x the best median before them. A
    single low count is noise (datasette: 0.92, 0.75, 0.91 work/s at 2, 4, 8 clients), and
    stopping at the first median that does not rise left the peak at 2-8 clients, where
    the gated runs then served 1.2-1.4 times it."""
    if len(medians) <= stop_after:
        return False
    best = max(medians[:-stop_after])
    return all(m < (1.0 - stop_drop) * best for m in medians[-stop_after:])


def peak_of(runs: list[dict]) -> dict:
    """The peak from the peak runs (`clients`, `work_per_s` each): per client count the
    median work rate of its repeats, and the best of those medians, with every run and the
    spread (max − min) of the chosen count's repeats."""
    by_clients: dict[int, list[float]] = {}
    for r in runs:
        by_clients.setdefault(r["clients"], []).append(r["work_per_s"])
    medians = {c: statistics.median(v) for c, v in by_clients.items()}
    best = max(medians, key=lambda c: medians[c])
    return {
        "work_per_s": medians[best],
        "clients": best,
        "statistic": "best client count by the median of its repeats",
        "median_by_clients": medians,
        "spread_work_per_s": max(by_clients[best]) - min(by_clients[best]),
        "best_single_run_work_per_s": max(r["work_per_s"] for r in runs),
        "runs": runs,
    }


def gate_summary(rows: list[dict], warmup_s: float, duration_s: float) -> dict | None:
    """The gate over the measurement window: mean load over capacity, queue and in flight,
    and the fraction of samples where the request the policy looks at first did not fit
    (the gate holding capacity back for it)."""
    g = [r["gate"] for r in rows if "gate" in r and warmup_s <= r["t_s"] <= duration_s]
    if not g:
        return None
    n = len(g)
    return {
        "samples": n,
        "mean_load_over_capacity": sum(x["load_s"] / x["capacity_s"] for x in g) / n,
        "mean_queue": sum(x["queue"] for x in g) / n,
        "mean_in_flight": sum(x["in_flight"] for x in g) / n,
        "head_blocked_fraction": sum(
            x["queue"] > 0 and x["load_s"] + x["head_cost_s"] > x["capacity_s"] + 1e-9 for x in g
        )
        / n,
    }


def cpu_summary(rows: list[dict], warmup_s: float, duration_s: float, work_per_s: float) -> dict | None:
    """Each sampled process's share of one CPU over the measurement window (its CPU seconds
    between the window's first and last samples over the time between them), and the work
    per second of backend CPU. On the bench's one CPU the backend, the gatekeeper and the
    load generator share it: a gate that leaves the backend idle lowers the backend's share,
    one that only changes what is served moves the work per backend CPU second, and more
    requests per second give the gatekeeper and the generator more of the CPU."""
    w = [r for r in rows if "cpu_s" in r and warmup_s <= r["t_s"] <= duration_s]
    if len(w) < 2 or w[-1]["t_s"] <= w[0]["t_s"]:
        return None
    span = w[-1]["t_s"] - w[0]["t_s"]
    shares = {k: (w[-1]["cpu_s"].get(k, 0.0) - v) / span for k, v in w[0]["cpu_s"].items()}
    backend = shares.get("backend")
    return {
        "cpu_fraction": shares,
        "work_per_backend_cpu_s": work_per_s / backend if backend else None,
    }


def backend_flags(table: dict) -> dict:
    """The gatekeeper's flags for a backend from its `[NAME]` table (unset: none)."""
    return {
        "max_in_flight": table.get("max_in_flight") or None,
        "estimate_basis": table.get("estimate_basis") or None,
    }


def run_backend(
    s: Settings, name: str, binary: str, tools: Path, scratch: Path, prefix: list[str]
) -> tuple[dict, dict[str, list[dict]]]:
    """One backend's measurements, and the gate's timelines of its gatekeeper runs."""
    b = s.backends[name]
    work = scratch / name
    work.mkdir(parents=True, exist_ok=True)
    backend = prepare(name, int(b["rows"]), s.seed, work, tools, prefix=prefix, **backend_flags(b))
    p = Point(s, backend, binary, work)
    with p.start() as be:
        p.measure_alone(be.url)
        print(f"{name}: cost alone (ms) {json.dumps(p.cost_ms)}", file=sys.stderr, flush=True)
    peak = p.peak()
    with p.start() as be:
        calibration = p.calibrate(be.url)
    capacity_us = int(calibration["best_capacity_us"])
    print(f"{name}: capacity {capacity_us} us", file=sys.stderr, flush=True)
    runs: dict[str, dict[str, dict]] = {m: {} for m in s.models}
    for model in s.models:
        for mode in s.modes:
            for rule in [None] if mode == "direct" else s.patience:
                runs[model][run_label(mode, rule)] = p.run(mode, model, capacity_us, peak, rule)
    costliest = max(p.cost_ms, key=lambda k: p.cost_ms[k])
    out = {
        "rows": backend.rows,
        "types": [{"name": t.name, "weight": t.weight, "path": t.path} for t in backend.types],
        "cost_alone_ms": p.cost_ms,
        "costliest_type": costliest,
        "peak": peak,
        "capacity_us": capacity_us,
        "calibration": calibration,
        "pinned": bool(prefix),
        "runs": runs,
    }
    out["checks"] = checks(out, s.modes, s.patience)
    return out, p.timelines


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench gatekeeper-foreign", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "configs",
        type=Path,
        nargs="+",
        help="experiment files, one per backend, e.g. lab/experiments/gatekeeper-datasette.toml",
    )
    ap.add_argument("--bin", default=str(shortfirst_binary()))
    ap.add_argument(
        "--tools", type=Path, default=Path(".make/foreign"), help="where make foreign-backends installs"
    )
    ap.add_argument("--out", type=Path, default=Path("results/gatekeeper-foreign"))
    ap.add_argument("--backends", default=None, help="comma-separated subset of the files' backends")
    ap.add_argument("--duration", type=float, default=None, help="seconds per run (overrides the file)")
    ap.add_argument(
        "--pin", default="auto", choices=["auto", "yes", "no"], help="backend on the reserved CPU"
    )
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a key of every experiment file (VALUE in TOML syntax), e.g. datasette.max_in_flight=8",
    )
    a = ap.parse_args(argv)
    overrides = {} if a.duration is None else {"duration_s": a.duration}
    settings = {}
    used: set[str] = set()
    for path in a.configs:
        # An override goes to the files that have its section (a backend's table is in its file only).
        sections = set(read_toml(path)[0])
        mine = [o for o in a.sets if o.partition(".")[0].strip() in sections]
        used.update(mine)
        s = Settings.load(path, overrides, mine)
        settings |= dict.fromkeys(s.backends, s)
    unused = [o for o in a.sets if o not in used]
    if unused:
        raise GatekeeperError(f"--set {unused[0]}: no experiment file given has that section")
    names = a.backends.split(",") if a.backends else list(settings)
    missing = [n for n in names if n not in settings]
    if missing:  # before anything runs, not after the backends before it
        raise GatekeeperError(f"--backends {a.backends}: no experiment file of backend {missing[0]!r}")
    prefix = pinned_prefix({"auto": None, "yes": True, "no": False}[a.pin])
    binary = str(Path(a.bin).resolve())
    result = {
        "provenance": provenance(extra={"config": " ".join(map(str, a.configs))}),
        # Per backend, the settings of its experiment file.
        "settings": {name: vars(settings[name]) for name in names},
        "backends": {},
    }
    timelines = {}
    with tempfile.TemporaryDirectory(prefix="gk-foreign-") as scratch:
        for name in names:
            result["backends"][name], timelines[name] = run_backend(
                settings[name], name, binary, a.tools, Path(scratch), prefix
            )
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / "timelines.json", {"sample_s": SAMPLE_S, "backends": timelines}, allow_nan=True)
    write_json(a.out / "summary.json", result)
    for name, b in result["backends"].items():
        print(table(name, b), file=sys.stderr)
    failed = [f"{n} {c['name']}" for n, b in result["backends"].items() for c in b["checks"] if not c["ok"]]
    print(f"wrote {a.out / 'summary.json'}; checks failed: {failed or 'none'}", file=sys.stderr)
    return 0
