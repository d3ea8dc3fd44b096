"""`bench sim`: the simulator's speed per policy (jobs per second of wall time), the Rust
example `crates/sim/examples/bench_sim.rs` run in release, its JSON written to `--out`.
The example measures and judges; this verb gives it a place among the lab's benchmarks."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from .. import commands
from ..kit import REPO, LabError


class SimBenchError(LabError):
    """The simulator benchmark did not run to the end."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench sim", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--out", type=Path, default=REPO / "results" / "bench-sim.json", help="the JSON result")
    ap.add_argument("--jobs", type=int, default=2_000_000, help="jobs per workload [2000000]")
    ap.add_argument("--cargo", default="cargo", help="the cargo to build with [cargo]")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error(f"--jobs {a.jobs}: must be at least 1")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    argv_ = commands.bench_sim(a.out.resolve(), a.jobs, cargo=a.cargo)
    rc = subprocess.run(argv_, cwd=REPO).returncode
    if rc != 0:
        raise SimBenchError(f"{' '.join(argv_)}: exit status {rc}")
    return 0
