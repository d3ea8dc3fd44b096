"""The synthetic gatekeeper bench's diagnosis helpers (shortfirst_lab.runners.gatekeeper.synthetic, run by
python -m shortfirst_lab bench gatekeeper-synthetic): how `timeline_summary` classifies moments
with idle backend processors, and the `--max-charge-share` specs, as tables."""

import pytest

from shortfirst_lab.runners.gatekeeper import synthetic as gkbench


@pytest.fixture(scope="module")
def bench():
    return gkbench


def row(t_s, in_model, busy_cpu_s, work_s, *, queue=0, in_flight=0, load_s=0.0, head_s=0.0, rejected=0):
    return {
        "t_s": t_s,
        "steal_s": 0.1 * t_s,
        "up": {"in_model": in_model, "busy_cpu_s": busy_cpu_s, "completed_work_s": work_s, "overrun_s": 0.0},
        "gate": {
            "load_s": load_s,
            "capacity_s": 2.0,
            "queue": queue,
            "in_flight": in_flight,
            "head_cost_s": head_s,
            "rejected_queue_wait": rejected,
        },
    }


def test_idle_moments_are_classified_by_what_the_gate_was_doing(bench):
    rows = [
        row(0.0, 1, 0.0, 0.0, queue=9, in_flight=1, load_s=1.5, head_s=1.5),  # warm-up: ignored
        # In the window [1, 5]: busy (5 in the model), then four idle moments.
        row(1.0, 5, 0.0, 0.0, queue=9, in_flight=5, load_s=1.9, head_s=0.5),
        row(2.0, 1, 3.0, 2.5, queue=9, in_flight=1, load_s=1.5, head_s=1.0),  # head blocked
        row(3.0, 2, 5.0, 4.0, queue=0, in_flight=2, load_s=0.2),  # nothing waits
        row(4.0, 3, 7.0, 6.0, queue=4, in_flight=32, load_s=0.4, head_s=0.1),  # in-flight cap
        row(5.0, 2, 9.0, 8.0, queue=4, in_flight=2, load_s=0.4, head_s=0.1, rejected=3),  # fits
        row(6.0, 1, 99.0, 99.0),  # after the window: ignored
    ]
    s = bench.timeline_summary(rows, warmup_s=1.0, duration_s=5.0, cpus=4, max_in_flight=32)
    assert s["samples"] == 5
    assert s["busy_cpus"] == pytest.approx(9.0 / 4)
    assert s["completed_work_per_s"] == pytest.approx(8.0 / 4)
    assert s["steal_cpus"] == pytest.approx(0.1)
    assert s["idle_fraction"] == pytest.approx(4 / 5)
    assert s["idle_samples_by_gate_state"] == {
        "queue_empty": 1,
        "in_flight_cap": 1,
        "head_blocked": 1,
        "head_fits": 1,
    }
    assert s["idle_mean_head_cost_ms"] == pytest.approx(1e3 * (1.0 + 0.0 + 0.1 + 0.1) / 4)
    assert s["rejected_queue_wait_in_window"] == 3


def test_too_few_samples_summarize_to_nothing(bench):
    assert bench.timeline_summary([row(2.0, 4, 1.0, 1.0)], 1.0, 5.0, 4, 32) == {}


@pytest.mark.parametrize(
    ("spec", "want"),
    [("rule", 1 / 4), ("none", None), ("0.5", 0.5), ("1", 1.0)],
)
def test_max_charge_share_specs(bench, spec, want):
    share, text = bench.max_charge_share_spec(spec)
    assert share == want
    assert text


@pytest.mark.parametrize("spec", ["0", "1.5", "-0.1", "quarter"])
def test_bad_max_charge_share_specs_are_refused(bench, spec):
    with pytest.raises(ValueError, match="max charge share"):
        bench.max_charge_share_spec(spec)
