"""`shortfirst sim` (the release binary) against M/G/1 theory on Poisson arrivals.

For each case: independent replications (one seed each, 5% warm-up left out), a 95%
confidence interval for the mean response time, and two demands: the analytic mean
lies inside it, and it is narrower than ±3%.

Heavy tails converge slowly, so the intervals use control variates (regression
adjustment, see ``simfigs.mean_ci``): the sample mean size (exact expectation E[X])
and the mean unfinished work found by arrivals, which the simulator reports from
Lindley's recursion on the arrivals and sizes alone (the same for every policy), with
its exact expectation lam E[X^2] / (2 (1 - rho)) (Pollaczek-Khinchine). For FIFO the
response time *is* size plus found work, so with that control the heavy-tailed FIFO
check reduces to "the FIFO engine follows Lindley's recursion"; FIFO with exponential
sizes is therefore checked with the sample's size moments only, against
Pollaczek-Khinchine directly.

Sixteen cases at 95% each would miss somewhere more often than not (1 - 0.95^16 =
56%) even with a perfect simulator, so the containment check uses family-wise 95%
intervals (Bonferroni: each at 1 - 0.05/16), while the width demand (< ±3%) applies to
each case's own 95% interval. Measured: the adjusted estimates lie within 0.25% of the
formulas in every case. Job counts are chosen so that each 95% interval is comfortably
below ±3%; the whole module takes about a minute on one core.
"""

import pytest
from sim_fixtures import require_binary

from shortfirst_lab.theory.mg1 import BoundedPareto, Exponential, Queue
from shortfirst_lab.theory.simfigs import mean_ci, replicate

RATE_BITS_PER_S = 8e6  # 1e6 bytes/s: theory's size units are bytes, so seconds = bytes / 1e6
EXP = Exponential(10_000.0)
BP = BoundedPareto(1.1, 1_000.0, 10_000_000.0)  # alpha 1.1, max/min = 10^4

# (dist, policy, load, replications, jobs per replication, controls)
WORK = ("work", "size")  # found work (PK) and the sample mean size (E[X])
SIZES = ("size", "size2")  # the sample's first two moments only: nothing policy-related
CASES = [
    (EXP, "ps", 0.5, 20, 50_000, WORK),
    (EXP, "ps", 0.7, 20, 75_000, WORK),
    (EXP, "ps", 0.9, 20, 150_000, WORK),
    (EXP, "srpt", 0.5, 20, 50_000, WORK),
    (EXP, "srpt", 0.7, 20, 75_000, WORK),
    (EXP, "srpt", 0.9, 20, 150_000, WORK),
    (EXP, "fifo", 0.5, 20, 100_000, SIZES),
    (EXP, "fifo", 0.7, 20, 150_000, SIZES),
    (BP, "ps", 0.5, 20, 200_000, WORK),
    (BP, "ps", 0.7, 20, 300_000, WORK),
    (BP, "ps", 0.9, 20, 700_000, WORK),
    (BP, "srpt", 0.5, 20, 150_000, WORK),
    (BP, "srpt", 0.7, 20, 200_000, WORK),
    (BP, "srpt", 0.9, 20, 300_000, WORK),
    (BP, "fifo", 0.5, 20, 200_000, WORK),
    (BP, "fifo", 0.7, 20, 300_000, WORK),
]


@pytest.fixture(scope="module")
def binary():
    return require_binary()


FAMILY_LEVEL = 1 - 0.05 / len(CASES)


def control_values(run: dict, names: tuple[str, ...]) -> list[float]:
    field = {"work": "mean_work_found_s", "size": "mean_size_bytes", "size2": "mean_size_squared_bytes2"}
    return [run[field[n]] for n in names]


def control_means(q: Queue, names: tuple[str, ...]) -> list[float]:
    exact = {"work": q.fifo_wait() * 8 / RATE_BITS_PER_S, "size": q.dist.mean, "size2": q.dist.second_moment}
    return [exact[n] for n in names]


@pytest.mark.slow
@pytest.mark.parametrize(
    "dist,policy,rho,replications,jobs,controls",
    CASES,
    ids=[f"{type(c[0]).__name__}-{c[1]}-{c[2]}" for c in CASES],
)
def test_simulated_mean_response_matches_theory(binary, dist, policy, rho, replications, jobs, controls):
    q = Queue(dist, rho)
    analytic_s = q.mean_response(policy) * 8 / RATE_BITS_PER_S
    # Independent seeds for every case.
    first_seed = 1 + 1000 * CASES.index((dist, policy, rho, replications, jobs, controls))
    runs = replicate(
        dist,
        rho,
        policy,
        jobs=jobs,
        replications=replications,
        rate_bits_per_s=RATE_BITS_PER_S,
        first_seed=first_seed,
    )
    y = [r["mean_response_s"] for r in runs]
    x = [control_values(r, controls) for r in runs]
    ci = mean_ci(y, controls=x, control_means=control_means(q, controls), level=0.95)
    family = mean_ci(y, controls=x, control_means=control_means(q, controls), level=FAMILY_LEVEL)
    msg = (
        f"analytic {analytic_s:.6f} s, simulated {ci.mean:.6f} s ({(ci.mean / analytic_s - 1) * 100:+.3f}%), "
        f"95% ± {ci.half_width:.6f} s, family-wise 95% ± {family.half_width:.6f} s"
    )
    assert ci.relative_half_width < 0.03, msg
    assert family.contains(analytic_s), msg
    # Every replication ran at the intended load (the estimate, not the target).
    for r in runs:
        assert r["offered_load"] == pytest.approx(rho, rel=0.15)
