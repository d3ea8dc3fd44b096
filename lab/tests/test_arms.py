"""Arms of the matrix (`experiment.arms`: a policy under a scheduler): validation, run names, and
the runner's testbed and server flags per arm (the summary per arm: test_arm_summary.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_runner import FakeTestbed, fake_env  # noqa: F401 - the fixture, shared

from shortfirst_lab.runners import factors
from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec.experiment import (
    Arm,
    ExperimentError,
    experiment_from_dict,
    load_experiment,
    run_dir_name,
)
from shortfirst_lab.testbed.bed import tbf_burst_bytes

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _doc(arms=None, **sections):
    doc = {
        "experiment": {"name": "t", "loads": [0.5, 0.9]},
        "workload": {"kind": "surge", "files": 10, "requests": 10},
        "run": {"duration_s": 10},
    }
    if arms is not None:
        doc["experiment"]["arms"] = arms
    for name, keys in sections.items():
        doc.setdefault(name, {}).update(keys)
    return doc


FOUR = ["fair", "srpt", "srpt/user", "srpt/crovella"]
USER = ["--scheduler", "user", "--link-rate", "10000000"]
CROVELLA = ["--scheduler", "crovella", "--link-rate", "10000000"]


@pytest.mark.parametrize(
    ("doc", "key", "expected"),
    [
        (_doc(FOUR, experiment={"policies": ["fair"]}), "experiment.arms", "either experiment.policies or"),
        (_doc([]), "experiment.arms", "a non-empty list of arms"),
        (_doc("srpt/user"), "experiment.arms", "a non-empty list of arms"),
        (_doc(["srpt/gpu"]), "experiment.arms", "each arm POLICY[/SCHEDULER]"),
        (_doc(["lifo/user"]), "experiment.arms", "each arm POLICY[/SCHEDULER]"),
        (_doc(["srpt/"]), "experiment.arms", "each arm POLICY[/SCHEDULER]"),
        (_doc(["SRPT"]), "experiment.arms", "each arm POLICY[/SCHEDULER]"),
        (_doc([3]), "experiment.arms", "each arm a string"),
        (_doc(["srpt", "srpt/kernel"]), "experiment.arms", "no duplicate arms"),
        (_doc(["fair", "srpt/user", "srpt/user"]), "experiment.arms", "no duplicate arms"),
        (_doc(["fair"] * 17), "experiment.arms", "at most 16 arms"),
        (_doc(["fair", "srrt/user"]), "experiment.arms", "refuses srrt"),
        (_doc(["fair", "srpt2/crovella"]), "experiment.arms", "refuses srpt2"),
        (_doc(["fair", "las"]), "experiment.arms", "(las needs a user-space scheduler: las/user)"),
        (
            _doc(experiment={"policies": ["fair", "las"]}),
            "experiment.policies",
            "each policy one of fair|srpt|srpt2|srrt",
        ),
        (_doc(FOUR, experiment={"baselines": ["fair/user"]}), "experiment.baselines", "distinct arms of"),
        (_doc(FOUR, uplink={"rate": "500gbit"}), "uplink.rate", "at most 400000000000 bit/s"),
        (_doc(FOUR, server={"extra_args": ["--scheduler", "user"]}), "server.extra_args", "--scheduler"),
        (_doc(FOUR, server={"extra_args": ["--uplink-rate=1mbit"]}), "server.extra_args", "runner sets"),
        (
            _doc(["fair", "srpt"], server={"write_concurrency": 10}),
            "server.write_concurrency",
            "crovella arm",
        ),
        (_doc(FOUR, server={"write_concurrency": -1}), "server.write_concurrency", "an integer in [0,"),
        (_doc(FOUR, experiment={"loads": [1.2]}), "experiment.arms", "kernel arms only in an overload"),
        (_doc(FOUR, client={"load_schedule": "const@0.5"}), "experiment.arms", "kernel arms only"),
        (_doc(FOUR, setups={"A": {}}), "experiment.arms", "kernel arms only"),
        # The policies form keeps its own checks and, with no arms, the server's flags are still
        # the runner's (a --scheduler there would leave the kernel's tree under a user pacer).
        (
            _doc(experiment={"policies": ["fair"]}, server={"extra_args": ["--scheduler=user"]}),
            "server.extra_args",
            "--scheduler",
        ),  # fmt: skip
        (_doc(), "experiment.policies", "this key (it is required)"),
        # A kernel srpt arm needs a band per class: HTB sends a priority with no class to band 0.
        (_doc(["fair", "srpt"], uplink={"bands": 6}), "uplink.bands", "at least 7: the data bands"),
        (
            _doc(["srpt"], uplink={"bands": 2}, server={"cutoffs": "1K,5K"}),
            "uplink.bands",
            "at least 3: the data bands that server.cutoffs ('1K,5K')",
        ),
        (_doc(["srpt"], uplink={"bands": 5}, server={"cutoffs": "auto"}), "uplink.bands", "at least 6"),
    ],
)
def test_bad_arms_fail_naming_file_key_and_expectation(doc, key, expected):
    with pytest.raises(ExperimentError) as ei:
        experiment_from_dict(doc, "arms.toml")
    e = ei.value
    assert e.key == key, str(e)
    assert expected in e.expected, str(e)
    assert str(e).startswith(f"arms.toml: {key}: expected ")


def test_the_uplinks_bands_follow_the_cutoffs_a_kernel_srpt_arm_needs():
    """No `bands`: `uplink setup`'s default, the default cutoffs' bands; fewer bands are fine
    where no kernel srpt arm needs them (user-space SRPT has no bands; FAIR uses one)."""
    assert experiment_from_dict(_doc(["fair", "srpt"])).uplink.bands == 7
    six = experiment_from_dict(_doc(["srpt"], uplink={"bands": 6}, server={"cutoffs": "1K,2K,5K,20K,50K"}))
    assert six.uplink.bands == 6
    assert experiment_from_dict(_doc(["fair", "srpt/user"], uplink={"bands": 1})).uplink.bands == 1
    auto = experiment_from_dict(_doc(["srpt"], uplink={"bands": 6}, server={"cutoffs": "auto"}))
    assert auto.uplink.bands == 6


def test_arms_give_the_policies_and_default_to_the_kernel():
    exp = experiment_from_dict(_doc([" fair", "srpt/kernel", "srpt/user", "fair/crovella"]))
    assert exp.arms == (Arm("fair"), Arm("srpt"), Arm("srpt", "user"), Arm("fair", "crovella"))
    assert exp.policies == ("fair", "srpt")
    assert exp.arm_labels() == ("fair", "srpt", "srpt/user", "fair/crovella")
    assert exp.to_dict()["experiment"]["arms"] == ["fair", "srpt", "srpt/user", "fair/crovella"]
    assert "policies" not in exp.to_dict()["experiment"]


def test_las_is_an_arm_of_the_user_space_schedulers():
    exp = experiment_from_dict(_doc(["fair", "las/user", "las/crovella"]))
    assert exp.policies == ("fair", "las")
    assert [s.run_id for s in exp.matrix()][:3] == [
        "fair-load0.50-rep1", "las-user-load0.50-rep1", "las-crovella-load0.50-rep1"
    ]  # fmt: skip


def test_a_policies_file_has_kernel_arms_and_reads_back_as_before():
    exp = experiment_from_dict(_doc(experiment={"policies": ["fair", "srpt"]}))
    assert exp.arms == () and exp.arm_list() == (Arm("fair"), Arm("srpt"))
    d = exp.to_dict()
    assert list(d["experiment"]) == ["name", "description", "policies", "loads", "repeats", "seed"]
    assert "write_concurrency" not in d["server"]
    assert [s.run_id for s in exp.matrix()] == [
        "fair-load0.50-rep1", "srpt-load0.50-rep1", "fair-load0.90-rep1", "srpt-load0.90-rep1"
    ]  # fmt: skip


def test_matrix_runs_the_arms_of_a_point_back_to_back_with_one_seed():
    doc = _doc(FOUR, experiment={"repeats": 2, "seed": 7}, server={"write_concurrency": 35})
    exp = experiment_from_dict(doc)
    specs = exp.matrix()
    assert [(s.run_id, s.seed) for s in specs[:8]] == [
        ("fair-load0.50-rep1", 7), ("srpt-load0.50-rep1", 7),
        ("srpt-user-load0.50-rep1", 7), ("srpt-crovella-load0.50-rep1", 7),
        ("fair-load0.50-rep2", 8), ("srpt-load0.50-rep2", 8),
        ("srpt-user-load0.50-rep2", 8), ("srpt-crovella-load0.50-rep2", 8),
    ]  # fmt: skip
    assert len(specs) == 16 and len({s.run_id for s in specs}) == 16
    assert [(s.policy, s.scheduler) for s in specs[:4]] == [
        ("fair", "kernel"), ("srpt", "kernel"), ("srpt", "user"), ("srpt", "crovella")
    ]  # fmt: skip
    assert exp.to_dict()["server"]["write_concurrency"] == 35


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("srpt", 0.9, 1), "srpt-load0.90-rep1"),
        (("srpt", 0.9, 1, None, "", "", "kernel"), "srpt-load0.90-rep1"),
        (("srpt", 0.9, 1, None, "", "", "user"), "srpt-user-load0.90-rep1"),
        (("fair", 0.95, 3, None, "", "", "crovella"), "fair-crovella-load0.95-rep3"),
    ],
)
def test_run_names_carry_a_non_kernel_scheduler(args, name):
    assert run_dir_name(*args) == name


def test_run_names_with_a_wan_path():
    doc = _doc(["fair", "srpt/user"], wan={"paths": [{"rtt_ms": 100, "loss": 0.01}]})
    assert [s.run_id for s in experiment_from_dict(doc).matrix()][:2] == [
        "fair-load0.50-rtt100ms-loss1pct-rep1", "srpt-user-load0.50-rtt100ms-loss1pct-rep1"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("scheduler", "concurrency", "flags"),
    [
        ("kernel", 35, []),
        ("user", 35, [*USER, "--pacer-burst-bytes", "6056"]),
        ("crovella", 0, [*CROVELLA, "--pacer-burst-bytes", "6056"]),
        ("crovella", 35, [*CROVELLA, "--pacer-burst-bytes", "6056", "--write-concurrency", "35"]),
    ],
)
def test_scheduler_flags_of_serve(scheduler, concurrency, flags):
    exp = experiment_from_dict(_doc(FOUR, server={"write_concurrency": concurrency}))
    assert factors.scheduler_flags(scheduler, exp.uplink, exp.server) == flags


@pytest.mark.parametrize(
    ("pacer_burst", "mtu", "flags"),
    [
        ("link", 1500, [*USER, "--pacer-burst-bytes", "6056"]),
        ("link", 9000, [*USER, "--pacer-burst-bytes", "36056"]),  # four frames at least
        ("none", 1500, USER),
    ],
)
def test_user_arms_bank_the_shaping_buckets_burst(pacer_burst, mtu, flags):
    exp = experiment_from_dict(_doc(FOUR, server={"pacer_burst": pacer_burst}, uplink={"mtu": mtu}))
    assert factors.scheduler_flags("user", exp.uplink, exp.server) == flags


@pytest.mark.parametrize(
    ("mtu", "rate", "want"),
    [
        (1500, 10_000_000, 6056),
        (1500, 100_000_000, 25_000),
        (9000, 10_000_000, 36_056),
        (576, 1_000_000, 2360),
    ],
)
def test_the_token_buckets_burst_is_the_htb_roots(mtu, rate, want):
    """Both shapers let the same out at line rate on an idle link (uplink::htb's root burst:
    four frames, or 2 ms at the rate)."""
    assert tbf_burst_bytes(mtu, rate) == want


def test_user_arms_take_the_pacer_rate_fraction():
    exp = experiment_from_dict(_doc(FOUR, server={"pacer_rate_fraction": 0.995, "pacer_burst": "none"}))
    assert factors.scheduler_flags("user", exp.uplink, exp.server) == [
        *USER,
        "--pacer-rate-fraction",
        "0.995",
    ]
    assert factors.scheduler_flags("kernel", exp.uplink, exp.server) == []
    for bad in (0.3, 1.2, "x"):
        with pytest.raises(ExperimentError, match="pacer_rate_fraction"):
            experiment_from_dict(_doc(FOUR, server={"pacer_rate_fraction": bad}))


def test_pacer_burst_is_checked():
    with pytest.raises(ExperimentError, match="pacer_burst"):
        experiment_from_dict(_doc(FOUR, server={"pacer_burst": "6k"}))
    with pytest.raises(ExperimentError, match="pacer-burst-bytes"):
        experiment_from_dict(_doc(FOUR, server={"extra_args": ["--pacer-burst-bytes", "1"]}))


@pytest.mark.parametrize(
    ("name", "rate"),
    [
        ("userspace.toml", 10_000_000),
        ("userspace-smoke.toml", 10_000_000),
        ("userspace-100mbit.toml", 100_000_000),
    ],
)
def test_shipped_userspace_experiments_validate(name, rate):
    exp = load_experiment(EXPERIMENTS / name)
    assert exp.arm_labels() == ("fair", "srpt", "srpt/user", "srpt/crovella")
    assert exp.uplink.rate_bits_per_s == rate
    assert exp.server.write_concurrency == 35
    ids = [s.run_id for s in exp.matrix()]
    assert len(set(ids)) == len(ids) == (5 if exp.baseline_rerun else 4) * len(exp.loads)
    if name != "userspace-smoke.toml":
        assert exp.loads == (0.5, 0.7, 0.8, 0.9, 0.95)


# --------------------------------------------------------------------------- the runner (fake testbed)


def test_runner_shapes_and_starts_each_arm(fake_env, tmp_path):  # noqa: F811 - the fixture
    exp_path, bin_path = fake_env
    text = exp_path.read_text().replace(
        'policies = ["fair", "srpt"]', 'arms = ["fair", "srpt/user", "srpt/crovella"]'
    )
    exp_path.write_text(text.replace("[server]\n", "[server]\nwrite_concurrency = 7\n"))
    out = tmp_path / "out"
    summary = runner.Runner(load_experiment(exp_path), out, bin_path, progress=False).run()
    # Calibration, then one testbed per arm: the kernel's tree, then token buckets.
    assert FakeTestbed.shapers == ["htb", "htb", "tbf", "tbf"]
    for run, scheduler, flags in (
        ("fair-load0.50-rep1", None, None),
        ("srpt-user-load0.50-rep1", "user", "--scheduler user --link-rate 1000000"),
        (
            "srpt-crovella-load0.50-rep1",
            "crovella",
            "--scheduler crovella --link-rate 1000000 --pacer-burst-bytes 6056 --write-concurrency 7",
        ),
    ):
        d = out / "runs" / run
        serve = next(line for line in (d / "commands.txt").read_text().splitlines() if " serve " in line)
        assert (flags in serve) if flags else ("--scheduler" not in serve), serve
        rec = json.loads((d / "run.json").read_text())
        assert rec["status"] == "ok" and rec.get("scheduler") == scheduler
    assert [r["policy"] for r in summary["runs"]] == ["fair", "srpt", "srpt"]


def test_the_testbed_knows_its_shapers():
    from shortfirst_lab.testbed.bed import SHAPERS, Testbed

    assert SHAPERS == ("htb", "tbf")
    with pytest.raises(ValueError, match="shaper 'cbq': expected one of htb, tbf"):
        Testbed("abc", 10_000_000, shaper="cbq")


@pytest.mark.parametrize(
    ("name", "load", "rtt_ms", "loss"),
    [("userspace-wan.toml", 0.8, 300, 0.02), ("crovella-saturated.toml", 1.0, 500, 0.03)],
)
def test_shipped_crovella_experiments_put_35_writers_against_far_lossy_clients(name, load, rtt_ms, loss):
    exp = load_experiment(EXPERIMENTS / name)
    assert exp.arm_labels() == ("fair", "srpt/user", "srpt/crovella")
    assert exp.server.write_concurrency == 35 and exp.loads == (load,)
    (group,) = exp.client.groups
    assert (group.clients, group.path.rtt_ms, group.path.loss) == (exp.client.clients, rtt_ms, loss)
    assert [s.run_id for s in exp.matrix()][0].startswith(f"fair-load{load:.2f}")
