"""Measured against modelled: the same runs through the simulator and M/G/1 theory.

For each measured run the report can set beside it
- *simulated*: `shortfirst sim` replaying the run's own arrivals (its `scheduled_s` and sizes)
  through an ideal link of the nominal rate, with the policy the server approximates
  (`fair` → `ps`, `srpt`/`srpt2` → `srpt-classes:<the server's cutoffs>`; `srpt` under a
  user-space scheduler, which ranks by exact remaining bytes → `srpt`), written by the
  runner to `DIR/runs/<run>/sim/requests.csv` when the binary has `sim`;
- *analytic*: M/G/1 at the run's load with the window's empirical size distribution
  (`theory.Queue`, from the simulator's issue): `ps`, `classes-ps` with the same cutoffs, and
  exact `srpt` as the ideal.

- *wire ideal*: the same replay with each request's **wire cost** as its service instead of its
  body (`wire`: head, 66 bytes of headers per segment, the connection's control bytes, fitted
  to the run's own qdisc byte count), in `DIR/runs/<run>/sim-wire/` (`idealsim`; rows carry
  the measured ids and body sizes; size classes still decide by the body, their cutoffs mapped
  through the same model).

Both are optional: without `shortfirst sim` or `theory.py` the report simply leaves them out.
The gap measured − simulated is what TCP, the kernel and the generator add to an ideal link;
simulated − analytic is the effect of the trace's bursty (non-Poisson) arrivals.

The wire ideal is the honest one: the best any scheduler could do on *this* link. The payload
ideal serves only the bodies, but the link also carries ~260 bytes of HTTP head per response,
66 bytes per ≤1448-byte segment and 244–300 bytes of SYN-ACK, ACKs and FIN per connection: 15%
more than the bodies on the 10 Mbit/s testbed. At offered load 0.5 (payload) the uplink counted
5.56 Mbit/s in the window, which the fitted model reproduces; at "0.9" the wire runs at ρ ≈ 1
(9.6 Mbit/s counted, 10.1 offered by the model) and at "0.95" above 1 (10.7 offered), while the
payload ideal runs at 0.9 and 0.95. So measured ÷ payload ideal grows with load because the
ideal link is faster than the real one (kernel SRPT: 2.7 at 0.9, 3.2 at 0.95), while measured ÷
wire ideal stays at 0.98–1.00 for kernel SRPT at every load from 0.5 to 0.95.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from ..spec import vocabulary

_UNITS = {"": 1, "k": 1_000, "ki": 1_024, "m": 1_000_000, "mi": 1_048_576, "g": 1_000_000_000, "gi": 1 << 30}


def parse_cutoffs(text: str) -> list[int]:
    """`1K,2K,5KiB` → bytes, as the server parses them."""
    out = []
    for part in text.split(","):
        p = part.strip().lower().removesuffix("b")
        num = p.rstrip("kmgi")
        out.append(int(num) * _UNITS[p[len(num) :]])
    return out


#: Policies the simulator and the M/G/1 formulas model: those ranking by size. `srrt` ranks by
#: a TCP_INFO estimate, which needs per-connection path state the simulator does not have.
SIZE_POLICIES = ("fair", "srpt", "srpt2")
#: `serve` policies the simulator replays (`sim_policy_of`): those ranking by size, and las.
MODELLED_POLICIES = (*SIZE_POLICIES, "las")


def cutoffs_for(policy: str, cutoffs: str, sizes_bytes: Any) -> list[int] | None:
    """The cutoffs the server uses for `policy` (None for fair; `auto` → the srpt default, as
    the binary the lab drives has it)."""
    if policy == "fair":
        return None
    if policy == "srpt2":
        return [int(np.median(sizes_bytes))]
    if cutoffs and cutoffs != "auto":
        return parse_cutoffs(cutoffs)
    return list(vocabulary.default_cutoffs_bytes())


def exact(policy: str, scheduler: str) -> bool:
    """Whether the server runs exact SRPT: `serve --policy srpt` under a user-space scheduler
    ranks by remaining bytes; the kernel's bands can only rank by size class."""
    return policy == "srpt" and scheduler != "kernel"


def sim_policy_of(policy: str, scheduler: str, cutoffs: str, sizes_bytes: Any) -> str:
    """The simulator's name for what `serve --policy <policy>` does under `scheduler` with the
    experiment's `server.cutoffs`."""
    if policy == "las":
        return "las"
    return sim_policy(cutoffs_for(policy, cutoffs, sizes_bytes), exact(policy, scheduler))


def sim_policy(cutoffs: list[int] | None, exact_srpt: bool = False) -> str:
    """The simulator's name for the server's policy with these cutoffs (None: FAIR = ps), or
    exact SRPT."""
    if exact_srpt:
        return "srpt"
    return "ps" if cutoffs is None else "srpt-classes:" + ",".join(str(c) for c in cutoffs)


def theory_module():
    try:
        return importlib.import_module("shortfirst_lab.theory.mg1")
    except ImportError:
        return None


def analytic(
    sizes_bytes: Any, load: float, rate_bits_per_s: float, cutoffs: list[int] | None, exact_srpt: bool = False
) -> dict[str, Any]:
    """M/G/1 mean response (s) for the policy's model and for exact SRPT, or {} without theory."""
    th = theory_module()
    if th is None or load >= 1.0:
        return {}
    x = np.asarray(sizes_bytes, dtype=float) * 8.0 / rate_bits_per_s
    try:
        q = th.Queue(th.Empirical(x), load)
        out: dict[str, Any] = {"analytic_srpt_s": float(q.mean_response("srpt"))}
        if exact_srpt:
            out["analytic_model"] = "srpt"
            out["analytic_s"] = out["analytic_srpt_s"]
        elif cutoffs is None:
            out["analytic_model"] = "ps"
            out["analytic_s"] = float(q.mean_response("ps"))
        else:
            c = [b * 8.0 / rate_bits_per_s for b in cutoffs]
            out["analytic_model"] = "classes-ps"
            out["analytic_s"] = float(q.mean_response("classes-ps", cutoffs=c))
    except (ValueError, ArithmeticError) as e:  # theory.TheoryError is a ValueError
        return {"analytic_error": f"{type(e).__name__}: {e}"}
    return out
