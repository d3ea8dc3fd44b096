"""The M/G/1 formulas against closed forms, known values and independent quadrature."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from shortfirst_lab.theory.mg1 import (
    BoundedPareto,
    Empirical,
    Exponential,
    Lognormal,
    Queue,
    TheoryError,
    parse_dist,
    slowdown_by_percentile,
    surge,
)

DISTS = [
    Exponential(3000.0),
    BoundedPareto.with_mean(1.1, 3000.0, 1e4),
    BoundedPareto.with_mean_and_max(1.1, 3000.0, 1e10),
    Lognormal(7.0, 1.5),
    surge(),
]


@pytest.mark.parametrize("rho", [0.3, 0.7, 0.95])
def test_exponential_ps_and_fifo_closed_forms(rho):
    m = 2.5
    q = Queue(Exponential(m), rho)
    # M/M/1: PS and FIFO both have E[T] = m / (1 - rho).
    assert q.mean_response("ps") == pytest.approx(m / (1 - rho), rel=1e-12)
    assert q.mean_response("fifo") == pytest.approx(m / (1 - rho), rel=1e-12)
    assert q.response("fifo", 1.0)[0] == pytest.approx(1.0 + rho * m / (1 - rho), rel=1e-12)
    assert q.mean_slowdown("ps") == pytest.approx(1 / (1 - rho))
    assert q.mean_slowdown("fifo") == math.inf  # E[1/X] diverges for the exponential


@pytest.mark.parametrize("dist", DISTS, ids=repr)
def test_partial_moments_match_quadrature(dist):
    mean = dist.mean
    for x in [0.5 * mean, 2 * mean, 20 * mean]:
        x = min(x, dist.hi)
        for j in (0, 1, 2):
            lo = dist.lo
            want, _ = integrate.quad(
                lambda t, j=j: t**j * float(dist.pdf(t)),
                lo,
                x,
                limit=500,
                points=[b for b in dist.breakpoints() if lo < b < x] or None,
            )
            assert float(dist.partial_moment(j, x)) == pytest.approx(want, rel=1e-6), (j, x)
    assert float(dist.cdf(dist.ppf(0.9))) == pytest.approx(0.9, rel=1e-9)


def test_known_values_from_the_papers():
    # Crovella Table 1: the Surge mix has mean 11,108 bytes.
    assert surge().mean == pytest.approx(11108, rel=1e-3)
    # Crovella §6.2: for exponential sizes the largest 1% carry ~5% of the work; for the
    # bounded Pareto alpha = 1.1 (mean 3000, max 10^10) more than half.
    e = Exponential(3000.0)
    assert 1 - float(e.partial_moment(1, e.ppf(0.99))) / e.mean == pytest.approx(0.056, abs=0.001)
    b = BoundedPareto.with_mean_and_max(1.1, 3000.0, 1e10)
    assert 1 - float(b.partial_moment(1, b.ppf(0.99))) / b.mean > 0.5


def srpt_by_nested_quad(dist, rho):
    """E[T] for SRPT straight from Schrage-Miller's per-size formula, nested scipy quad."""
    lam = rho / dist.mean

    def rho_x(x):
        return lam * integrate.quad(lambda t: t * dist.pdf(t), 0, x, limit=200)[0]

    def t_of_x(x):
        m2 = integrate.quad(lambda t: t * t * dist.pdf(t), 0, x, limit=200)[0]
        wait = lam * (m2 + x * x * (1 - dist.cdf(x)))
        wait /= 2 * (1 - rho_x(x)) ** 2
        res = integrate.quad(lambda t: 1 / (1 - rho_x(t)), 0, x, limit=200)[0]
        return wait + res

    return integrate.quad(lambda x: t_of_x(x) * dist.pdf(x), 0, 40 * dist.mean, limit=200)[0]


def test_srpt_exponential_against_nested_quadrature():
    q = Queue(Exponential(1.0), 0.7)
    assert q.mean_response("srpt") == pytest.approx(srpt_by_nested_quad(Exponential(1.0), 0.7), rel=1e-6)


def test_srpt_equal_sizes_is_md1():
    # All sizes 1: SRPT never preempts (ties in arrival order), so it is M/D/1 FIFO.
    for rho in (0.5, 0.9):
        q = Queue(Empirical([1.0, 1.0, 1.0]), rho)
        md1 = 1 + rho / (2 * (1 - rho))
        assert q.mean_response("srpt") == pytest.approx(md1, rel=1e-12)
        assert q.mean_response("fifo") == pytest.approx(md1, rel=1e-12)
        assert q.response("srpt", [1.0])[0] == pytest.approx(md1, rel=1e-12)


def test_empirical_converges_to_the_continuous_distribution():
    b = BoundedPareto.with_mean(1.1, 3000.0, 1e4)
    sample = b.sample(400_000, np.random.default_rng(7))
    emp = Queue(Empirical(sample), 0.8)
    cont = Queue(b, 0.8)
    # Same load by construction; the sample's tail is noisy, so 3%.
    assert emp.mean_response("srpt") / emp.dist.mean == pytest.approx(
        cont.mean_response("srpt") / b.mean, rel=0.03
    )
    assert emp.mean_slowdown("srpt") == pytest.approx(cont.mean_slowdown("srpt"), rel=0.02)


@pytest.mark.parametrize("dist", DISTS, ids=repr)
def test_orderings_and_limits(dist):
    for rho in (0.5, 0.9):
        q = Queue(dist, rho)
        srpt, ps = q.mean_response("srpt"), q.mean_response("ps")
        assert srpt < ps  # SRPT minimises mean response time
        assert srpt < q.mean_response("fifo")
        classes = q.mean_response("classes-ps", [dist.ppf(0.5), dist.ppf(0.9), dist.ppf(0.99)])
        assert srpt < classes < ps  # the band approximation sits in between
        assert q.mean_slowdown("srpt") < q.mean_slowdown("ps")
    # Bansal & Harchol-Balter: at load <= 0.5 every size does at least as well under SRPT as under PS.
    q = Queue(dist, 0.5)
    xs = dist.ppf(np.linspace(0.001, 0.999, 50))
    assert np.all(q.slowdown("srpt", xs) <= 1 / (1 - 0.5) + 1e-9)
    # Tiny jobs see an almost idle server under SRPT; the smallest bounded-Pareto job k waits
    # only for the truncated work of the job in service: T(k) = k + lam k^2 / 2.
    if dist.lo > 0:
        assert q.slowdown("srpt", dist.lo)[0] == pytest.approx(1 + q.lam * dist.lo / 2, rel=1e-9)
    else:
        assert q.slowdown("srpt", float(dist.ppf(1e-6)))[0] == pytest.approx(1.0, abs=1e-3)
    # One class holding everything is plain PS / FIFO.
    top = [float(dist.ppf(1 - 1e-12)) * 10 if math.isinf(dist.hi) else dist.hi * 10]
    assert q.mean_response("classes-ps", top) == pytest.approx(q.mean_response("ps"), rel=1e-6)
    assert q.mean_response("classes-fifo", top) == pytest.approx(q.mean_response("fifo"), rel=1e-6)


def test_per_size_means_integrate_to_the_overall_mean():
    d = Lognormal(7.0, 1.5)
    q = Queue(d, 0.8)
    qs = (np.arange(200_000) + 0.5) / 200_000
    xs = d.ppf(qs)
    for policy in ("srpt", "classes-ps", "classes-fifo"):
        cut = [1000.0, 5000.0]
        per_size = q.response(policy, xs, cut)
        assert per_size.mean() == pytest.approx(q.mean_response(policy, cut), rel=2e-3), policy


def test_classes_fifo_is_the_priority_queue_formula():
    # Two classes of exponential sizes split at 1: hand-computed Kleinrock result for class 2.
    d = Exponential(1.0)
    q = Queue(d, 0.6)
    lam = q.lam
    s1 = lam * float(d.partial_moment(1, 1.0))
    x = 3.0
    want = x / (1 - s1) + lam * d.second_moment / (2 * (1 - s1) * (1 - 0.6))
    assert q.response("classes-fifo", [x], [1.0])[0] == pytest.approx(want, rel=1e-12)


def test_bad_input_is_rejected():
    with pytest.raises(TheoryError):
        Queue(Exponential(1.0), 1.0)
    with pytest.raises(TheoryError):
        BoundedPareto(1.1, 10, 5)
    with pytest.raises(TheoryError):
        Queue(Exponential(1.0), 0.5).mean_response("lifo")
    with pytest.raises(TheoryError):
        Queue(Exponential(1.0), 0.5).mean_response("classes-ps", [5.0, 2.0])
    with pytest.raises(TheoryError):
        parse_dist("pareto:1")
    assert isinstance(parse_dist("bpareto:1.1,1000,1e7"), BoundedPareto)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=300),
    rho=st.floats(min_value=0.05, max_value=0.95),
)
def test_empirical_srpt_never_worse_than_ps_or_fifo(sizes, rho):
    q = Queue(Empirical(sizes), rho)
    srpt = q.mean_response("srpt")
    assert srpt <= q.mean_response("ps") * (1 + 1e-9)
    assert srpt <= q.mean_response("fifo") * (1 + 1e-9)


def test_crovella_figure_7_numbers():
    """Load 0.9, same mean: exponential vs bounded Pareto alpha = 1.1 (max 10^10, as in [12])."""
    pct = np.linspace(0.005, 0.99, 198)
    e = Queue(Exponential(3000.0), 0.9)
    b = Queue(BoundedPareto.with_mean_and_max(1.1, 3000.0, 1e10), 0.9)
    se = slowdown_by_percentile(e, "srpt", pct)
    sb = slowdown_by_percentile(b, "srpt", pct)
    assert np.all(np.diff(se) > 0)
    assert sb.max() < 1.65  # Crovella: "no task size ... greater than 1.6" (plotted to the 99th)
    top = slowdown_by_percentile(e, "srpt", np.linspace(0.951, 0.9999, 50))
    assert top.min() >= 5.0  # the largest 5% of exponential sizes: slowdown 5 and more
