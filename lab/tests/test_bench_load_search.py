"""The rate search of `make bench-load` (crates/load/bench/bench_load.py): when a rate
counts as sustained, failed or inconclusive given each probe's outcome and the host's
steal, as tables of probe outcomes against the decision."""

import pytest
from conftest import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("crates/load/bench/bench_load.py", "bench_load")


def scripted(outcomes: dict[int, list[tuple[bool, list[float]]]]):
    """A probe that answers each rate's probes in turn from `outcomes`: (sustained,
    steal seconds per CPU) over a 4 s probe; counts the probes it ran."""
    ran: list[int] = []

    def probe(rate: int) -> dict:
        k = sum(r == rate for r in ran)
        ran.append(rate)
        ok, steal = outcomes[rate][k]
        return {"target_req_per_s": rate, "sustained": ok, "steal_s_per_cpu": steal, "wall_s": 4.0}

    return probe, ran


QUIET, STOLEN, OTHER_CPU_STOLEN = [0.01, 0.02], [0.3, 0.01], [0.01, 0.01, 0.9]


@pytest.mark.parametrize(
    "probes, cpus, expect_sustained, expect_probes, expect_inconclusive",
    [
        # One success is enough.
        ([(True, QUIET)], None, True, 1, False),
        # A success under steal still counts.
        ([(True, STOLEN)], None, True, 1, False),
        # Two clean failures fail the rate.
        ([(False, QUIET), (False, QUIET)], None, False, 2, False),
        # A clean failure, then a success: sustained (one stall from elsewhere).
        ([(False, QUIET), (True, QUIET)], None, True, 2, False),
        # Failures under steal are retried until a probe decides.
        ([(False, STOLEN), (False, STOLEN), (True, QUIET)], None, True, 3, False),
        ([(False, STOLEN), (False, QUIET), (False, STOLEN), (False, QUIET)], None, False, 4, False),
        # Only steal-limited failures: five probes, then inconclusive.
        ([(False, STOLEN)] * 5, None, False, 5, True),
        # One clean failure among them: a failure, not inconclusive.
        ([(False, STOLEN)] * 4 + [(False, QUIET)], None, False, 5, False),
        # Steal on a CPU neither the server nor the generator uses does not excuse a failure.
        ([(False, OTHER_CPU_STOLEN), (False, OTHER_CPU_STOLEN)], [0, 1], False, 2, False),
        # ... but counts when nothing is pinned (every CPU is judged).
        ([(False, OTHER_CPU_STOLEN)] * 5, None, False, 5, True),
    ],
)
def test_one_rate(bench, probes, cpus, expect_sustained, expect_probes, expect_inconclusive):
    probe, ran = scripted({20_000: probes})
    # cap = start and resolution = start: the search probes the one rate and stops.
    out = bench.search(probe, 20_000, 20_000, 20_000, cpus=cpus)
    assert len(ran) == expect_probes
    assert [r["attempt"] for r in out] == list(range(1, expect_probes + 1))
    assert any(r["sustained"] for r in out) == expect_sustained
    assert all(r.get("inconclusive", False) == expect_inconclusive for r in out)
    for r in out:
        assert r["steal_limited"] == (not r["sustained"] and r["steal_share"] > bench.STEAL_LIMIT_SHARE)


def test_search_brackets_the_highest_sustained_rate(bench):
    # The generator sustains up to 12,300/s; every probe at 10,000/s fails once under steal
    # first. Doubling from 5,000: 5,000 and 10,000 pass, 20,000 fails; bisection to 1,000.
    def probe(rate: int) -> dict:
        first_at_10k = rate == 10_000 and not any(r == 10_000 for r in seen)
        seen.append(rate)
        ok = rate <= 12_300 and not first_at_10k
        steal = STOLEN if first_at_10k else QUIET
        return {"target_req_per_s": rate, "sustained": ok, "steal_s_per_cpu": steal, "wall_s": 4.0}

    seen: list[int] = []
    out = bench.search(probe, 5_000, 80_000, 1000)
    best = max(r["target_req_per_s"] for r in out if r["sustained"])
    failed = min(r["target_req_per_s"] for r in out if not r["sustained"] and not r["steal_limited"])
    assert best <= 12_300 < failed and failed - best <= 1000
    assert [r["steal_limited"] for r in out if r["target_req_per_s"] == 10_000] == [True, False]
