"""The ideals of a run: `shortfirst sim` on the run's own arrivals through an ideal link of the
nominal rate (see `models`), twice:

- ``rdir/sim/``: each request's service is its body size (the payload ideal);
- ``rdir/sim-wire/``: each request's service is its wire cost (`wire`: body, head, segment
  headers and the connection's control bytes, fitted to the run's own byte count). The trace
  holds the wire cost as ``size_bytes``; the simulator's ``requests.csv`` is then mapped back:
  ``id`` the measured request's id, ``size_bytes`` and ``bytes_received`` the body's, and a
  ``wire_bytes`` column the cost it was served with. Size classes (kernel SRPT) keep deciding by
  the body: their cutoffs are mapped through the same model (wire is increasing in size, so a
  request starts in the class its body puts it in). ``wire_model.json`` records the fit.

A farm's run (`runners.farm`) is simulated the same way as a farm (`Farm`: `shortfirst sim
--servers C --dispatch RULE`), its wire model fitted to every host's uplink bytes together.

The runner calls `simulate` after each run; `resimulate` redoes both for an experiment directory
from its raw logs (``python -m shortfirst_lab report DIR --resimulate``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .. import commands
from ..kit import write_atomic, write_json
from ..spec.experiment import Experiment
from . import models, wire

SIM_TIMEOUT_S = 600


def _trace(rdir: Path) -> pd.DataFrame:
    """The run's requests in arrival order (the order the simulator numbers them in)."""
    req = pd.read_csv(rdir / "requests.csv", usecols=["id", "scheduled_s", "path", "size_bytes"])
    return req.sort_values("scheduled_s", kind="mergesort").reset_index(drop=True)


def _run_sim(bin_path: Path, sdir: Path, trace: pd.DataFrame, policy: str, rate: int, **farm: Any) -> str:
    """`shortfirst sim` on `trace` into `sdir`; `farm`: `servers` and `dispatch` of a farm."""
    out = trace.rename(columns={"scheduled_s": "time_s"})[["time_s", "path", "size_bytes"]]
    write_atomic(sdir / "trace.csv", out.to_csv(index=False))
    argv = commands.sim(bin_path, policy=policy, rate=rate, out=sdir, trace=sdir / "trace.csv", **farm)
    write_atomic(sdir / "commands.txt", shlex.join(argv) + "\n")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=SIM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "failed: timed out"
    write_atomic(sdir / "sim.log", r.stdout + r.stderr)
    return "ok" if r.returncode == 0 else f"failed: exit {r.returncode} (see {sdir.name}/sim.log)"


def wire_policy(policy: str, scheduler: str, cutoffs: str, sizes: Any, model: wire.WireModel) -> str:
    """The simulator's policy for wire-cost jobs: the body's cutoffs mapped through `model`."""
    if policy == "las":
        return "las"
    cut = models.cutoffs_for(policy, cutoffs, sizes)
    if cut is not None:
        cut = [int(c) for c in model.cost_bytes(cut)]
    return models.sim_policy(cut, models.exact(policy, scheduler))


def _map_back(sdir: Path, trace: pd.DataFrame, cost: np.ndarray) -> None:
    """The simulator's rows (numbered in trace order) → the measured ids and body sizes."""
    sim = pd.read_csv(sdir / "requests.csv")
    pos = sim["id"].to_numpy(dtype=int)
    if len(sim) != len(trace) or (sim["size_bytes"].to_numpy() != cost[pos]).any():
        raise ValueError(f"{sdir}/requests.csv: rows do not match the trace")
    ok = sim["bytes_received"].to_numpy() == sim["size_bytes"].to_numpy()
    sim["id"] = trace["id"].to_numpy()[pos]
    sim["wire_bytes"] = cost[pos]
    sim["size_bytes"] = trace["size_bytes"].to_numpy()[pos]
    sim["bytes_received"] = np.where(ok, sim["size_bytes"], sim["bytes_received"])
    write_atomic(sdir / "requests.csv", sim.to_csv(index=False))


class Farm(NamedTuple):
    """A farm's dispatch for the simulator: `hosts` links of the nominal rate, each request
    sent on arrival by `rule` (`shortfirst sim --dispatch`: ``round-robin``,
    ``least-connections``), or by size interval (``sita``) at `cutoffs` (body bytes)."""

    hosts: int
    rule: str
    cutoffs: tuple[int, ...] = ()

    def args(self, model: wire.WireModel | None = None) -> dict[str, Any]:
        """`commands.sim`'s farm arguments; for wire-cost jobs (`model`) the cutoffs mapped
        through it, so each request goes to the host its body sends it to."""
        if self.rule != "sita":
            return {"servers": self.hosts, "dispatch": self.rule}
        cut = [int(c) for c in (model.cost_bytes(list(self.cutoffs)) if model else self.cutoffs)]
        return {"servers": self.hosts, "dispatch": "sita:" + ",".join(map(str, cut))}


def simulate(
    bin_path: Path,
    exp: Experiment,
    rdir: Path,
    policy: str,
    scheduler: str = "kernel",
    farm: Farm | None = None,
) -> str:
    """Both ideals of one run (module doc), on one link or on a `farm`; "ok" or what failed."""
    trace = _trace(rdir)
    rate = exp.uplink.rate_bits_per_s
    sdir = rdir / "sim"
    sdir.mkdir(exist_ok=True)
    pol = models.sim_policy_of(policy, scheduler, exp.server.cutoffs, trace["size_bytes"])
    status = _run_sim(bin_path, sdir, trace, pol, rate, **(farm.args() if farm else {}))
    model, fit = wire.fit_run(rdir, trace["size_bytes"])
    wdir = rdir / "sim-wire"
    wdir.mkdir(exist_ok=True)
    cost = model.cost_bytes(trace["size_bytes"])
    wpol = wire_policy(policy, scheduler, exp.server.cutoffs, trace["size_bytes"], model)
    write_json(wdir / "wire_model.json", fit | {"policy": wpol})
    wstatus = _run_sim(
        bin_path, wdir, trace.assign(size_bytes=cost), wpol, rate, **(farm.args(model) if farm else {})
    )
    if wstatus == "ok":
        try:
            _map_back(wdir, trace, cost)
        except (OSError, KeyError, ValueError, pd.errors.ParserError) as e:
            wstatus = f"failed: {e}"
    if status == "ok" and wstatus == "ok":
        return "ok"
    return "; ".join(f"{name}: {s}" for name, s in (("sim", status), ("sim-wire", wstatus)) if s != "ok")


def resimulate(out: Path, exp: Experiment, bin_path: Path) -> dict[str, str]:
    """Both ideals of every ok run of the experiment directory, from its raw logs; per run, the
    status (also written to its run.json as ``sim``)."""
    done: dict[str, str] = {}
    for spec in exp.matrix():
        if spec.rerun:  # the same arrivals as its first run: the same ideal
            continue
        rdir = out / "runs" / spec.run_id
        rec_path = rdir / "run.json"
        if not (rdir / "requests.csv").exists() or not rec_path.exists():
            continue
        rec = json.loads(rec_path.read_text())
        if rec.get("status") != "ok" or spec.policy not in models.MODELLED_POLICIES:
            continue
        rec["sim"] = simulate(bin_path, exp, rdir, spec.policy, spec.scheduler)
        write_json(rec_path, rec)
        done[spec.run_id] = rec["sim"]
    return done
