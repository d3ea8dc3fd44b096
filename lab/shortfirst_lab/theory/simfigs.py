"""Simulator runs, replication statistics and theory-vs-simulation figures.

- :func:`run_sim` drives ``shortfirst sim`` (the release binary) and returns its summary.
- :func:`replicate` runs independent replications (different seeds) and
  :func:`mean_ci` turns them into a 95% confidence interval for the mean response
  time, optionally with control variates (regression adjustment, Law & Kelton
  §11.3): controls are per-replication quantities whose expectation is known
  exactly, e.g. the sample mean size (``E[X]``) or the mean work an arrival finds
  (policy-independent; Pollaczek-Khinchine ``lam E[X^2] / (2(1 - rho))``).
- :func:`slowdown_buckets` reads a ``requests.csv`` and gives the mean slowdown
  per size-percentile bucket (Harchol-Balter's 0.5% buckets).
- :func:`figure7` reproduces Crovella et al. 1999 Figure 7 (and Figure 8 from the
  formulas), theory and simulator side by side, writing PNGs and a JSON of the
  numbers.

Command line: ``python -m shortfirst_lab theory fig7 --out DIR``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .. import commands
from ..kit import LabError, shortfirst_binary
from .mg1 import BoundedPareto, Exponential, Queue, SizeDist, slowdown_by_percentile


class SimError(LabError, RuntimeError):
    """``shortfirst sim`` failed or could not be found."""


def find_binary() -> Path:
    """``$SHORTFIRST_BIN``, else the repository's release build."""
    path = shortfirst_binary()
    if not path.is_file():
        raise SimError(f"{path}: no shortfirst binary; build it with `make build` (or set SHORTFIRST_BIN)")
    return path


def run_sim(
    out_dir: str | Path,
    *,
    policy: str,
    rate: str,
    workload: str | None = None,
    jobs: int | None = None,
    arrival_rate: float | None = None,
    load: float | None = None,
    trace: str | Path | None = None,
    seed: int = 1,
    servers: int = 1,
    warmup_jobs: int = 0,
    summary_only: bool = False,
    binary: Path | None = None,
) -> dict:
    """Runs ``shortfirst sim`` once; returns the parsed ``summary.json``."""
    cmd = commands.sim(
        binary or find_binary(),
        policy=policy,
        rate=rate,
        out=out_dir,
        trace=trace,
        workload=workload,
        jobs=None if workload is None else jobs,
        seed=None if workload is None else seed,
        arrival_rate=None if arrival_rate is None else float(arrival_rate),
        load=None if load is None else float(load),
        servers=servers,
        warmup_jobs=warmup_jobs,
        summary_only=summary_only,
    )
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SimError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return json.loads((Path(out_dir) / "summary.json").read_text())


def workload_spec(dist: SizeDist) -> str:
    """The ``--workload`` spelling of a theory distribution (exponential and bounded Pareto)."""
    if isinstance(dist, Exponential):
        return f"exp:{dist.m!r}"
    if isinstance(dist, BoundedPareto):
        return f"bpareto:{dist.alpha!r},{dist.k!r},{dist.p!r}"
    raise SimError(f"no workload spec for {dist!r}")


def replicate(
    dist: SizeDist,
    rho: float,
    policy: str,
    *,
    jobs: int,
    replications: int,
    rate_bits_per_s: float = 8e6,
    warmup_fraction: float = 0.05,
    first_seed: int = 1,
) -> list[dict]:
    """Independent replications of an M/G/1 queue: Poisson arrivals at the rate that makes
    load ``rho`` with the distribution's *exact* mean, i.i.d. sizes, one seed each."""
    arrival_rate = rho * rate_bits_per_s / 8 / dist.mean
    out = []
    with tempfile.TemporaryDirectory(prefix="shortfirst-sim-") as tmp:
        for r in range(replications):
            out.append(
                run_sim(
                    tmp,
                    policy=policy,
                    rate=f"{rate_bits_per_s:.0f}",
                    workload=workload_spec(dist),
                    jobs=jobs,
                    arrival_rate=arrival_rate,
                    seed=first_seed + r,
                    warmup_jobs=int(jobs * warmup_fraction),
                    summary_only=True,
                )
            )
    return out


@dataclass(frozen=True)
class Interval:
    mean: float
    half_width: float

    @property
    def relative_half_width(self) -> float:
        return self.half_width / abs(self.mean)

    def contains(self, x: float) -> bool:
        return abs(x - self.mean) <= self.half_width


def mean_ci(
    values: Sequence[float],
    controls: np.ndarray | None = None,
    control_means: Sequence[float] | None = None,
    level: float = 0.95,
) -> Interval:
    """Confidence interval for the mean of independent replications.

    With ``controls`` (one row per replication, one column per control) and their exact
    means, the estimate is the intercept of the regression of the values on the centred
    controls; its standard error comes from the residuals with ``R - q - 1`` degrees of
    freedom (valid for jointly normal replication means, as with long replications).
    """
    y = np.asarray(values, float)
    r = y.size
    if controls is None:
        if r < 2:
            raise ValueError("need at least 2 replications")
        hw = stats.t.ppf(0.5 + level / 2, r - 1) * y.std(ddof=1) / np.sqrt(r)
        return Interval(float(y.mean()), float(hw))
    x = np.asarray(controls, float).reshape(r, -1)
    q = x.shape[1]
    if r < q + 3:
        raise ValueError(f"need at least {q + 3} replications for {q} controls")
    a = np.column_stack([np.ones(r), x - np.asarray(control_means, float)])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    s2 = resid @ resid / (r - q - 1)
    cov = s2 * np.linalg.inv(a.T @ a)
    hw = stats.t.ppf(0.5 + level / 2, r - q - 1) * np.sqrt(cov[0, 0])
    return Interval(float(coef[0]), float(hw))


def slowdown_buckets(requests_csv: str | Path, rate_bits_per_s: float, n: int = 200) -> pd.DataFrame:
    """Mean slowdown per size-percentile bucket: ``n`` equal-count groups by size (ties by id).

    Slowdown = (done_s - scheduled_s) / (size_bytes * 8 / rate). Columns: bucket,
    pct_lo, pct_hi (fractions), size_lo, size_hi, count, mean_slowdown.
    """
    df = pd.read_csv(requests_csv, usecols=["id", "size_bytes", "outcome", "scheduled_s", "done_s"])
    df = df[(df["outcome"] == "ok") & (df["size_bytes"] > 0)].sort_values(
        ["size_bytes", "id"], kind="mergesort"
    )
    m = len(df)
    if m == 0:
        raise SimError(f"{requests_csv}: no completed request with a size")
    service = df["size_bytes"].to_numpy() * 8 / rate_bits_per_s
    slowdown = (df["done_s"].to_numpy() - df["scheduled_s"].to_numpy()) / service
    bucket = (np.arange(m) * n) // m
    g = pd.DataFrame({"bucket": bucket, "size": df["size_bytes"].to_numpy(), "slowdown": slowdown}).groupby(
        "bucket"
    )
    out = pd.DataFrame(
        {
            "size_lo": g["size"].min(),
            "size_hi": g["size"].max(),
            "count": g.size(),
            "mean_slowdown": g["slowdown"].mean(),
        }
    ).reset_index()
    out.insert(1, "pct_lo", out["bucket"] / n)
    out.insert(2, "pct_hi", (out["bucket"] + 1) / n)
    return out


def theory_buckets(queue: Queue, policy: str, n: int = 200, points: int = 40) -> np.ndarray:
    """Mean slowdown per size-percentile bucket from the formulas: the per-size slowdown
    averaged over ``points`` evenly spaced quantiles inside each bucket."""
    u = (np.arange(n * points) + 0.5) / (n * points)
    s = slowdown_by_percentile(queue, policy, u)
    return s.reshape(n, points).mean(axis=1)


def figure7(
    out_dir: str | Path, jobs: int = 1_000_000, seed: int = 1, rho: float = 0.9, mean_bytes: float = 3000.0
) -> dict:
    """Crovella Fig. 7 (load 0.9, SRPT, exponential vs bounded Pareto alpha 1.1 with the same
    mean; the bounded Pareto as in their analysis: maximum 10^10) from the formulas and from
    ``shortfirst sim``; Fig. 8 (alpha from 0.5 to 1.9, mean 3000) from the formulas.
    Writes fig7.png, fig7-sim-vs-theory.png, fig8.png and fig7.json into ``out_dir``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dists = {
        "exponential": Exponential(mean_bytes),
        "bounded Pareto α=1.1": BoundedPareto.with_mean_and_max(1.1, mean_bytes, 1e10),
    }
    # Slow link so that microsecond-precision records resolve even 1-byte jobs (100 µs each).
    rate = 80_000.0
    numbers: dict = {"load": rho, "jobs": jobs, "seed": seed, "rate_bits_per_s": rate, "distributions": {}}
    n = 200
    fine = np.linspace(0.0005, 0.9995, 2000)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fig2, ax2 = plt.subplots(figsize=(5, 5))
    for (name, dist), color in zip(dists.items(), ["tab:red", "tab:blue"], strict=True):
        q = Queue(dist, rho)
        th_fine = slowdown_by_percentile(q, "srpt", fine)
        th_buckets = theory_buckets(q, "srpt", n)
        with tempfile.TemporaryDirectory(prefix="shortfirst-fig7-") as tmp:
            summary = run_sim(
                tmp,
                policy="srpt",
                rate=f"{rate:.0f}",
                workload=workload_spec(dist),
                jobs=jobs,
                arrival_rate=rho * rate / 8 / dist.mean,
                seed=seed,
            )
            sim = slowdown_buckets(Path(tmp) / "requests.csv", rate, n)
        ax.plot(fine * 100, th_fine, color=color, label=f"{name}: formula")
        ax.plot(
            sim["pct_hi"] * 100 - 0.25,
            sim["mean_slowdown"],
            "o",
            ms=2.5,
            color=color,
            label=f"{name}: simulator",
        )
        ax2.plot(th_buckets[sim["bucket"]], sim["mean_slowdown"], "o", ms=3, color=color, label=name)
        numbers["distributions"][name] = _fig7_numbers(dist, q, th_buckets, sim, summary)
    _save_fig7(fig, ax, out / "fig7.png", rho, mean_bytes)
    _save_sim_vs_theory(fig2, ax2, out / "fig7-sim-vs-theory.png")
    plt.close(fig)
    plt.close(fig2)
    numbers["figure8"] = _figure8(out / "fig8.png", fine, rho, mean_bytes)
    (out / "fig7.json").write_text(json.dumps(numbers, indent=1))
    return numbers


def _fig7_numbers(dist: SizeDist, q: Queue, th_buckets: np.ndarray, sim: pd.DataFrame, summary: dict) -> dict:
    """fig7.json's numbers for one distribution: the formulas' and the simulator's slowdowns."""
    top5 = sim["pct_lo"] >= 0.95
    return {
        "dist": repr(dist),
        "theory_max_slowdown_pct_0_to_99": float(
            slowdown_by_percentile(q, "srpt", np.linspace(0.001, 0.99, 991)).max()
        ),
        "theory_max_bucket_slowdown": float(th_buckets.max()),
        "theory_min_bucket_slowdown_top5pct": float(th_buckets[190:].min()),
        "theory_slowdown_at_95th_percentile": float(slowdown_by_percentile(q, "srpt", [0.95])[0]),
        "theory_slowdown_at_99th_percentile": float(slowdown_by_percentile(q, "srpt", [0.99])[0]),
        "sim_max_bucket_slowdown": float(sim["mean_slowdown"].max()),
        "sim_min_bucket_slowdown_top5pct": float(sim.loc[top5, "mean_slowdown"].min()),
        "sim_mean_slowdown": summary["mean_slowdown"],
        "theory_mean_slowdown": q.mean_slowdown("srpt"),
        "sim_offered_load": summary["offered_load"],
        "max_abs_relative_bucket_error": float(
            np.max(np.abs(sim["mean_slowdown"].to_numpy() / th_buckets[sim["bucket"]] - 1))
        ),
        "buckets": {
            "pct_hi": sim["pct_hi"].round(4).tolist(),
            "sim": sim["mean_slowdown"].round(5).tolist(),
            "theory": th_buckets[sim["bucket"]].round(5).tolist(),
        },
    }


def _save_fig7(fig, ax, path: Path, rho: float, mean_bytes: float) -> None:
    """Labels Fig. 7 (slowdown per size percentile, formula and simulator) and writes it."""
    ax.set_xlabel("percentile of job size distribution")
    ax.set_ylabel("mean slowdown under SRPT")
    ax.set_title(f"Crovella et al. Fig. 7 — M/G/1 SRPT, load {rho}, mean size {mean_bytes:g} B")
    ax.axhline(1.6, color="grey", lw=0.7, ls=":")
    ax.set_ylim(0.8, None)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)


def _save_sim_vs_theory(fig, ax, path: Path) -> None:
    """Labels the simulator-against-formula scatter (log-log, with the diagonal) and writes it."""
    lim = max(ax.get_xlim()[1], ax.get_ylim()[1])
    ax.plot([1, lim], [1, lim], color="grey", lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("formula (mean slowdown of the 0.5% bucket)")
    ax.set_ylabel("simulator")
    ax.set_title("simulated vs analytic, SRPT load 0.9")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)


def _figure8(path: Path, fine: np.ndarray, rho: float, mean_bytes: float) -> dict:
    """Crovella Fig. 8 from the formulas, written to ``path``; each alpha's largest slowdown."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    numbers = {}
    for alpha in (0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9):
        q = Queue(BoundedPareto.with_mean_and_max(alpha, mean_bytes, 1e10), rho)
        s = slowdown_by_percentile(q, "srpt", fine)
        ax.plot(fine * 100, s, label=f"α = {alpha}")
        numbers[str(alpha)] = {"max_slowdown_pct_to_99_95": float(s.max())}
    ax.set_xlabel("percentile of job size distribution")
    ax.set_ylabel("mean slowdown under SRPT")
    ax.set_title(f"Crovella et al. Fig. 8 — bounded Pareto (max 10^10), mean {mean_bytes:g} B, load {rho}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return numbers
