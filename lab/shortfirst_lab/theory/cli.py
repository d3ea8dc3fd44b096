"""Command line for the queueing theory and the simulator figures.

    python -m shortfirst_lab theory means --dist bpareto:1.1,1000,1e7 --load 0.9
    python -m shortfirst_lab theory means --trace-sizes requests.csv --load 0.8 --cutoffs 1000,2000,5000
    python -m shortfirst_lab theory fig7 --out results/theory [--jobs 1000000]
    python -m shortfirst_lab theory cutoffs --out results/cutoffs-sim

``means`` prints mean response time (in size units: bytes at a rate of 1 byte/s; divide
by the rate in bytes/s for seconds) and mean slowdown per policy as JSON. ``fig7`` writes
the Crovella Figure 7/8 reproduction, ``cutoffs`` the simulated comparison of the kernel
bands' cutoffs (`cutoffs.py`); both need the release binary (``make build``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import pandas as pd

from . import cutoffs as cutoff_sweep
from .mg1 import POLICIES, Empirical, Queue, TheoryError, parse_dist
from .simfigs import SimError, figure7


def _means(args: argparse.Namespace) -> dict:
    if args.trace_sizes:
        df = pd.read_csv(args.trace_sizes, usecols=["size_bytes"])
        dist = Empirical(df["size_bytes"].to_numpy())
    else:
        dist = parse_dist(args.dist)
    cutoffs = [float(c) for c in args.cutoffs.split(",")] if args.cutoffs else []
    q = Queue(dist, args.load)
    out = {"dist": repr(dist), "load": args.load, "mean_size": dist.mean, "cutoffs": cutoffs, "policies": {}}
    for p in POLICIES:
        if p.startswith("classes") and not cutoffs:
            continue
        r, s = q.mean_response(p, cutoffs), q.mean_slowdown(p, cutoffs)
        out["policies"][p] = {
            "mean_response_size_units": r,
            "mean_slowdown": s if math.isfinite(s) else None,
        }
    return out


def _print_cutoffs(result: dict) -> None:
    """One line per workload, load and metric: each candidate's mean over the seeds."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for key, metrics in result["means"].items():
        workload, load, cand = key.split("/", 2)
        for metric, v in metrics.items():
            rows.setdefault((workload, load, metric), []).append(f"{cand} {v:.3g}")
    for (workload, load, metric), cells in rows.items():
        print(f"{workload} {load} {metric}: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shortfirst_lab theory", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("means", help="M/G/1 mean response time and slowdown per policy")
    src = m.add_mutually_exclusive_group(required=True)
    src.add_argument("--dist", help="exp:MEAN, bpareto:ALPHA,MIN,MAX, lognormal:MU,SIGMA, surge[:MAX]")
    src.add_argument("--trace-sizes", help="a CSV with a size_bytes column (trace.csv or requests.csv)")
    m.add_argument("--load", type=float, required=True)
    m.add_argument("--cutoffs", default="", help="class cutoffs in bytes, e.g. 1000,2000,5000,20000,50000")
    f = sub.add_parser("fig7", help="Crovella Fig. 7/8: slowdown vs size percentile, formulas and simulator")
    f.add_argument("--out", required=True)
    f.add_argument("--jobs", type=int, default=1_000_000)
    f.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("cutoffs", help="the kernel bands' cutoffs compared in simulation (wc98, a page)")
    c.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "means":
            print(json.dumps(_means(args), indent=1))
        elif args.cmd == "cutoffs":
            _print_cutoffs(cutoff_sweep.sweep(args.out))
            print(f"wrote {args.out}/summary.json")
        else:
            numbers = figure7(args.out, jobs=args.jobs, seed=args.seed)
            for name, d in numbers["distributions"].items():
                sim_top, th_top = (
                    d["sim_min_bucket_slowdown_top5pct"],
                    d["theory_min_bucket_slowdown_top5pct"],
                )
                print(
                    f"{name}: max bucket slowdown sim {d['sim_max_bucket_slowdown']:.3f} "
                    f"theory {d['theory_max_bucket_slowdown']:.3f}; "
                    f"top 5% min sim {sim_top:.3f} theory {th_top:.3f}"
                )
            print(f"wrote {args.out}/fig7.png, fig7-sim-vs-theory.png, fig8.png, fig7.json")
    except (TheoryError, SimError, OSError, ValueError) as e:
        print(f"theory_cli: error: {e}", file=sys.stderr)
        return 1
    return 0
