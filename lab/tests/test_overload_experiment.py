"""Overload keys of experiment files: load schedules (one or a matrix dimension), the overload
paper's factors (sysctls and generator flags), setups, and the shipped overload experiments."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest
from conftest import EXPERIMENT_TOML
from sim_fixtures import require_binary

from shortfirst_lab.analysis import overload
from shortfirst_lab.runners import factors
from shortfirst_lab.runners import static as runner
from shortfirst_lab.spec import schedules
from shortfirst_lab.spec.experiment import ExperimentError, load_experiment

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _load(tmp_path: Path, client: str):
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT_TOML + "\n[client]\n" + client)
    return load_experiment(p)


def test_persistent_overload_experiment_validates():
    exp = load_experiment(EXPERIMENTS / "overload-persistent.toml")
    assert exp.loads == (1.2, 1.4) and exp.run.duration_s >= 600


@pytest.mark.parametrize("spec", ["w1", "25s@0.2,25s@1.2", "const@1.4", "file:/tmp/sched.txt"])
def test_load_schedule_is_kept(tmp_path, spec):
    exp = _load(tmp_path, f'load_schedule = "{spec}"\n')
    assert exp.client.load_schedule == spec
    assert exp.to_dict()["client"]["load_schedule"] == spec


def test_no_schedule_by_default(tmp_path):
    exp = _load(tmp_path, "")
    assert exp.client.load_schedule == "" and "load_schedule" not in exp.to_dict()["client"]


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ('load_schedule = "   "\n', "a load schedule"),
        ('model = "closed:10"\nload_schedule = "w1"\n', "open or partly-open"),
        ("load_schedule = 3\n", "a string"),
    ],
)
def test_bad_schedules_name_the_key(tmp_path, client, expected):
    with pytest.raises(ExperimentError) as e:
        _load(tmp_path, client)
    assert e.value.key == "client.load_schedule" and expected in str(e.value)


# --------------------------------------------------------------------------- schedules as a dimension


def test_load_schedules_are_a_matrix_dimension(tmp_path):
    exp = _load(tmp_path, 'load_schedules = ["w1", "const@1.4", "25s@0.2,25s@1.2"]\n')
    runs = exp.matrix()
    assert [r.run_id for r in runs] == [
        f"{p}-load{ld:.2f}-{label}-rep1"
        for label in ("w1", "const1.4", "25sx0.2_25sx1.2")
        for ld in (0.7, 0.9)
        for p in ("fair", "srpt")
    ]
    assert {r.schedule for r in runs} == {"w1", "const@1.4", "25s@0.2,25s@1.2"}
    assert exp.to_dict()["client"]["load_schedules"] == ["w1", "const@1.4", "25s@0.2,25s@1.2"]


def test_a_single_schedule_keeps_the_run_names(tmp_path):
    exp = _load(tmp_path, 'load_schedule = "w3"\n')
    assert [r.run_id for r in exp.matrix()][:2] == ["fair-load0.70-rep1", "srpt-load0.70-rep1"]
    assert all(r.schedule == "w3" for r in exp.matrix())


@pytest.mark.parametrize(
    ("client", "key", "expected"),
    [
        ('load_schedules = "w1"\n', "client.load_schedules", "a list of load schedules"),
        ("load_schedules = [1]\n", "client.load_schedules", "a list of load schedules"),
        ('load_schedules = ["w1", "W1"]\n', "client.load_schedules", "distinct names"),
        ('load_schedules = ["w11"]\n', "client.load_schedules", "a load schedule"),
        ('load_schedules = ["25s@0"]\n', "client.load_schedules", "multiplier"),
        ('load_schedules = ["25x@1"]\n', "client.load_schedules", "duration"),
        ('load_schedules = ["0s@1"]\n', "client.load_schedules", "at least 1 ms"),
        ('load_schedules = ["file:"]\n', "client.load_schedules", "file:PATH"),
        ('load_schedule = "w1"\nload_schedules = ["w2"]\n', "client.load_schedules", "not both"),
        ('model = "closed:4"\nload_schedules = ["w2"]\n', "client.load_schedules", "open or partly-open"),
        ('load_schedule = "const@-1"\n', "client.load_schedule", "a load schedule"),
        ("requests_per_connection = 0\n", "client.requests_per_connection", "an integer in [1,"),
        ("requests_per_connection = 2.5\n", "client.requests_per_connection", "an integer"),
        ("abort_after_s = -1\n", "client.abort_after_s", "a number >= 0"),
        ("retries = 3\n", "client.retries", "abort_after_s > 0"),
        ("abort_after_s = 10\nretries = 101\n", "client.retries", "an integer in [0, 100]"),
        ("syn_retries = 128\n", "client.syn_retries", "an integer in [0, 127]"),
    ],
)
def test_bad_client_keys_name_the_key(tmp_path, client, key, expected):
    with pytest.raises(ExperimentError) as e:
        _load(tmp_path, client)
    assert e.value.key == key and expected in str(e.value), str(e.value)


def test_too_many_schedules_are_refused(tmp_path):
    many = ", ".join(f'"{i + 1}s@1"' for i in range(65))
    with pytest.raises(ExperimentError, match="at most 64 schedules"):
        _load(tmp_path, f"load_schedules = [{many}]\n")


def test_patience_must_fit_in_the_drain(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text(
        EXPERIMENT_TOML.replace("warmup_s = 10\n", "warmup_s = 10\ndrain_timeout_s = 330\n")
        + "\n[client]\ntimeout_s = 30\nabort_after_s = 100\nretries = 3\n"
    )
    with pytest.raises(ExperimentError) as e:
        load_experiment(p)
    assert e.value.key == "run.drain_timeout_s" and "abort_after_s x (client.retries + 1) (400)" in str(
        e.value
    )


# --------------------------------------------------------------------------- factor keys


def _exp(tmp_path, extra: str):
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT_TOML + extra)
    return load_experiment(p)


def test_factor_keys_become_sysctls_and_flags(tmp_path):
    exp = _exp(
        tmp_path,
        '\n[uplink]\nsyn_queue = 256\nsyncookies = "off"\nsynack_retries = 2\n'
        "\n[client]\nrequests_per_connection = 5\nabort_after_s = 7\nretries = 3\nsyn_retries = 3\n"
        "\n[server]\nmax_connections = 350\n",
    )
    assert factors.server_sysctls(exp.uplink) == {
        "net.ipv4.tcp_max_syn_backlog": 256,
        "net.ipv4.tcp_syncookies": 0,
        "net.ipv4.tcp_synack_retries": 2,
    }
    assert factors.client_sysctls(exp.client) == {"net.ipv4.tcp_syn_retries": 3}
    assert factors.load_flags(exp.client) == ["--persistent", "5", "--abort-after", "7s", "--retries", "3"]
    assert factors.serve_flags(exp.server) == ["--max-connections", "350"]
    d = exp.to_dict()
    assert d["uplink"]["syncookies"] == "off" and d["client"]["requests_per_connection"] == 5


@pytest.mark.parametrize(
    ("server", "flags"),
    [
        ('at_max_connections = "wait"', ["--at-max-connections", "wait"]),
        (
            'max_connections = 350\nat_max_connections = "wait"',
            ["--max-connections", "350", "--at-max-connections", "wait"],
        ),
        (
            'max_connections = 350\nat_max_connections = "refuse"',
            ["--max-connections", "350", "--at-max-connections", "refuse"],
        ),
        ('at_max_connections = ""', []),
    ],
)
def test_at_max_connections_becomes_the_serve_flag(tmp_path, server, flags):
    exp = _exp(tmp_path, f"\n[server]\n{server}\n")
    assert factors.serve_flags(exp.server) == flags
    d = exp.to_dict()["server"]
    assert d.get("at_max_connections", "") == exp.server.at_max_connections, "left out at its default"


def test_factor_keys_default_to_the_kernel_and_the_tools(tmp_path):
    exp = _exp(tmp_path, "")
    assert factors.server_sysctls(exp.uplink) == {} and factors.client_sysctls(exp.client) == {}
    assert factors.load_flags(exp.client) == [] and factors.serve_flags(exp.server) == []
    for mode, value in (("on", 1), ("always", 2)):
        up = _exp(tmp_path, f'\n[uplink]\nsyncookies = "{mode}"\n').uplink
        assert factors.server_sysctls(up) == {"net.ipv4.tcp_syncookies": value}


@pytest.mark.parametrize(
    ("section", "line", "key", "expected"),
    [
        ("uplink", 'syncookies = "yes"', "uplink.syncookies", '"off", "on" or "always"'),
        ("uplink", "syncookies = 1", "uplink.syncookies", "a string"),
        ("uplink", "syn_queue = -1", "uplink.syn_queue", "an integer in [0, 65535]"),
        ("uplink", "syn_queue = 70000", "uplink.syn_queue", "an integer in [0, 65535]"),
        ("uplink", "synack_retries = 256", "uplink.synack_retries", "an integer in [0, 255]"),
        ("uplink", "mtu = 536", "uplink.mtu", "an integer in [576, 9000]"),
        ("server", "max_connections = -5", "server.max_connections", "an integer in [0,"),
        ("server", 'max_connections = "350"', "server.max_connections", "an integer"),
        ("server", 'at_max_connections = "block"', "server.at_max_connections", "refuse|wait"),
        ("server", 'at_max_connections = "Wait"', "server.at_max_connections", "refuse|wait"),
        ("server", "at_max_connections = true", "server.at_max_connections", "a string"),
        (
            "server",
            'at_max_connections = "wait"\nextra_args = ["--at-max-connections=refuse"]',
            "server.extra_args",
            "no --at-max-connections beside server.at_max_connections",
        ),
    ],
)
def test_bad_factor_keys_name_the_key(tmp_path, section, line, key, expected):
    with pytest.raises(ExperimentError) as e:
        _exp(tmp_path, f"\n[{section}]\n{line}\n")
    assert e.value.key == key and expected in str(e.value), str(e.value)
    assert "exp.toml" in str(e.value), "names the file"


# --------------------------------------------------------------------------- setups

SETUPS = """
[client]
load_schedules = ["w1"]
timeout_s = 60

[setups.B]
description = "100 ms RTT"
wan.paths = [{ rtt_ms = 100 }]

[setups.E]
client.requests_per_connection = 5

[setups.I]
uplink.mtu = 576
"""


def test_setups_are_a_matrix_dimension_over_merged_sections(tmp_path):
    exp = _exp(tmp_path, SETUPS)
    names = [s.name for s in exp.setups]
    assert names == ["B", "E", "I"]
    runs = exp.matrix()
    assert [r.run_id for r in runs if r.load == 0.7] == [
        "fair-load0.70-rtt100ms-loss0pct-w1-setupB-rep1",
        "srpt-load0.70-rtt100ms-loss0pct-w1-setupB-rep1",
        "fair-load0.70-w1-setupE-rep1",
        "srpt-load0.70-w1-setupE-rep1",
        "fair-load0.70-w1-setupI-rep1",
        "srpt-load0.70-w1-setupI-rep1",
    ]
    by = {r.setup: exp.for_run(r) for r in runs}
    assert by["B"].wan.paths[0].rtt_ms == 100 and by["E"].wan is None
    assert by["E"].client.requests_per_connection == 5 and by["E"].client.timeout_s == 60, (
        "merged, not replaced"
    )
    assert by["I"].uplink.mtu == 576 and by["B"].uplink.mtu == 1500
    assert exp.for_run(runs[0]).run == exp.run, "the run timing is shared"
    d = exp.to_dict()["setups"]
    assert d["B"] == {"description": "100 ms RTT", "wan": {"paths": [{"rtt_ms": 100}]}}


@pytest.mark.parametrize(
    ("setups", "key", "expected"),
    [
        ("[setups.B]\nuplink.mtu = 100\n", "setups.B.uplink.mtu", "an integer in [576, 9000]"),
        ("[setups.B]\nclient.bogus = 1\n", "setups.B.client.bogus", "unknown key"),
        ("[setups.B]\nrun.duration_s = 5\n", "setups.B.run", "a setup varies these"),
        ("[setups.B]\nworkload.files = 5\n", "setups.B.workload", "a setup varies these"),
        ("[setups.B]\nuplink = 3\n", "setups.B.uplink", "a table of keys"),
        ("[setups.B]\ndescription = 3\n", "setups.B.description", "a string"),
        ('[setups."B-1"]\n', "setups.B-1", "1 to 16 letters or digits"),
        ("setups = 3\n", "setups", "tables [setups.NAME]"),
        ("[setups]\n", "setups", "at least one"),
    ],
)
def test_bad_setups_name_the_key(tmp_path, setups, key, expected):
    p = tmp_path / "exp.toml"
    p.write_text(
        setups + "\n" + EXPERIMENT_TOML if setups.startswith("setups =") else EXPERIMENT_TOML + "\n" + setups
    )
    with pytest.raises(ExperimentError) as e:
        load_experiment(p)
    assert e.value.key == key and expected in str(e.value), str(e.value)


def test_setups_survive_an_override_round_trip(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT_TOML + SETUPS)
    exp = load_experiment(p, ["run.duration_s=50"])
    again = tmp_path / "again.toml"
    again.write_text(exp.source)
    assert load_experiment(again).to_dict() == exp.to_dict()
    assert [r.run_id for r in load_experiment(again).matrix()] == [r.run_id for r in exp.matrix()]


# --------------------------------------------------------------------------- the shipped files


def test_transient_experiment_runs_w1_to_w10_on_the_baseline():
    exp = load_experiment(EXPERIMENTS / "overload-transient.toml")
    assert exp.client.load_schedules == tuple(f"w{i}" for i in range(1, 11))
    assert exp.loads == (1.0,) and set(exp.policies) == {"fair", "srpt"} and not exp.setups
    assert exp.uplink.syncookies == "off" and exp.uplink.accept_queue == exp.uplink.syn_queue == 512
    assert exp.wan is None and exp.client.requests_per_connection == 1 and exp.client.abort_after_s == 0
    assert len(exp.matrix()) == 20


def test_factors_experiment_runs_w1_under_table_2s_setups():
    exp = load_experiment(EXPERIMENTS / "overload-factors.toml")
    assert exp.client.load_schedules == ("w1",)
    s = {x.name: x.experiment for x in exp.setups}
    assert set(s) == set("BCDEFGHIJK")
    assert s["F"].uplink.initial_rto_ms == 500 and exp.uplink.initial_rto_ms == 0
    assert s["B"].wan.paths[0].rtt_ms == 100 and s["B"].wan.paths[0].loss == 0
    assert s["C"].wan.paths[0].loss == 0.05 and s["D"].wan.paths[0].rtt_ms == 100
    assert s["E"].client.requests_per_connection == 5
    assert s["G"].uplink.syncookies == "on" and s["I"].uplink.mtu == 576
    assert (s["H"].client.abort_after_s, s["H"].client.retries) == (10, 3)
    j = s["J"]
    assert (j.wan.paths[0].rtt_ms, j.wan.paths[0].loss, j.client.requests_per_connection) == (100, 0.05, 5)
    assert (j.client.abort_after_s, j.client.retries) == (7, 3)
    # K (ours): the baseline with the paper's Apache limit, nothing else changed.
    k = s["K"]
    assert (k.server.max_connections, k.server.at_max_connections) == (350, "wait")
    assert (exp.server.max_connections, exp.server.at_max_connections) != (350, "wait")
    assert k.wan is None and k.uplink == exp.uplink and k.client == exp.client
    assert len(exp.matrix()) == 20


def test_the_apache_variant_is_overload_persistent_with_the_papers_connection_limit():
    base = load_experiment(EXPERIMENTS / "overload-persistent.toml").to_dict()
    apache = load_experiment(EXPERIMENTS / "overload-persistent-apache.toml")
    assert (apache.server.max_connections, apache.server.at_max_connections) == (350, "wait")
    assert factors.serve_flags(apache.server) == ["--max-connections", "350", "--at-max-connections", "wait"]
    d = apache.to_dict()
    for key in ("name", "description"):
        del d["experiment"][key], base["experiment"][key]
    del d["server"]["max_connections"], d["server"]["at_max_connections"], base["server"]["max_connections"]
    assert d == base, "only the connection limit differs"


def test_persistent_and_rss_experiments_have_their_loads_and_lengths():
    p = load_experiment(EXPERIMENTS / "overload-persistent.toml")
    assert p.loads == (1.2, 1.4) and p.run.duration_s >= 600 and p.uplink.syncookies == "off"
    assert overload.applies(p)
    r = load_experiment(EXPERIMENTS / "overload-rss.toml")
    assert r.policies == ("srpt",) and r.loads == (1.4,) and r.run.duration_s >= 1800


# --------------------------------------------------------------------------- schedules module


@pytest.mark.parametrize(
    ("spec", "label", "kind", "mean", "period"),
    [
        ("w1", "w1", "preset", 0.7, 50),
        ("W10", "w10", "preset", (13.3 * 0.735 + 2 * 2) / 15.3, 15.3),
        ("w7", "w7", "preset", (63 * 0.4 + 6 * 5) / 69, 69),
        ("const@1.4", "const1.4", "const", 1.4, math.inf),
        ("25s@0.2,25s@1.2", "25sx0.2_25sx1.2", "phases", 0.7, 50),
        ("1m@1,500ms@3", "1mx1_500msx3", "phases", (60 + 1.5) / 60.5, 60.5),
    ],
)
def test_schedule_table(spec, label, kind, mean, period):
    s = schedules.parse(spec)
    assert (s.label, s.kind) == (label, kind)
    assert s.mean_multiplier == pytest.approx(mean)
    assert s.period_s == pytest.approx(period)


def test_schedule_files_are_read(tmp_path):
    f = tmp_path / "sched.txt"
    f.write_text("# low, then high\n10s 0.5\n\n10s@1.5  # overload\n")
    s = schedules.parse(f"file:{f}")
    assert s.phases == ((10.0, 0.5), (10.0, 1.5)) and s.label == "file_sched" and s.mean_multiplier == 1.0
    f.write_text("10s 0.5\n10s -1\n")
    with pytest.raises(schedules.ScheduleError, match=r"sched.txt:2: multiplier -1"):
        schedules.parse(f"file:{f}")
    with pytest.raises(schedules.ScheduleError, match="cannot read"):
        schedules.parse(f"file:{tmp_path / 'nowhere'}")


def test_presets_match_the_generator():
    """The lab's table of W1-W10 is the one `shortfirst load --help` prints."""
    binary = require_binary()
    text = subprocess.run([str(binary), "load", "--help"], capture_output=True, text=True, check=True).stdout
    rows = re.findall(
        r"^\s+(w\d+)\s+(\w+)\s+([\d.]+) s at ([\d.]+)\s+then\s+([\d.]+) s at ([\d.]+)", text, re.M
    )
    got = {w: (k, float(a), float(b), float(c), float(d)) for w, k, a, b, c, d in rows}
    assert got == {
        w: tuple(float(x) if i else x for i, x in enumerate(v)) for w, v in schedules.PRESETS.items()
    }


def test_a_missing_schedule_file_stops_the_run_before_it_starts(tmp_path):
    exp = _load(tmp_path, f'load_schedules = ["file:{tmp_path / "nowhere.txt"}"]\n')
    trace = tmp_path / "trace.csv"
    trace.write_text("time_s,path,size_bytes\n0,/a,1000\n")
    with pytest.raises(runner.RunnerError, match=r"synthetic: .*nowhere.txt: cannot read"):
        runner.check_trace_covers(exp, trace)


def test_the_trace_must_cover_the_run_at_the_schedules_mean(tmp_path):
    # 1,000 requests of 1,250 B = 10 Mbit: 1 s at 10 Mbit/s and load 1; the run lasts 100 s.
    trace = tmp_path / "trace.csv"
    trace.write_text("time_s,path,size_bytes\n" + "".join(f"{i},/a,1250\n" for i in range(1000)))
    exp = _load(tmp_path, 'load_schedules = ["const@0.005"]\n')  # at 0.9 x 0.005: 222 s
    assert runner.check_trace_covers(exp, trace)["max_load"] == pytest.approx(0.9 * 0.005)
    exp = _load(tmp_path, 'load_schedules = ["const@0.005", "w1"]\n')  # w1 at 0.9 x 0.7: 1.6 s
    with pytest.raises(runner.RunnerError, match="lasts only 2 s at load 0.63"):
        runner.check_trace_covers(exp, trace)
