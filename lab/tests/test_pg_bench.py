"""The PostgreSQL gatekeeper's bench (`bench pg`, `make bench-pg`): its experiment file's
rules, pgbench's scripts and logs as the bench reads them, the served-fraction accounting,
and, end to end (slow), a tiny run of both experiments against a real PostgreSQL, PgBouncer
and the gatekeeper."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.kit import REPO
from shortfirst_lab.runners.gatekeeper.pg import pgbench, verdict
from shortfirst_lab.runners.gatekeeper.pg.overload import classify
from shortfirst_lab.spec.pg import overload_arm
from shortfirst_lab.spec.reader import read_spec
from shortfirst_lab.spec.schema import SpecError

EXPERIMENT = REPO / "lab" / "experiments" / "pg-gatekeeper.toml"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ('overload.arms=["direct", "sjf@manual"]', "overload.arms[1]"),
        ('overload.arms=["sjf", "sjf+time"]', "overload.arms[1]"),
        ('overload.arms=["sjf", "sjf+cpu@auto"]', "overload.arms[1]"),
        ('overload.arms=["sjf", "sjf+bound+cpu"]', "overload.arms[1]"),
        ('overload.arms=["sjf", "sjf+bounded"]', "overload.arms[1]"),
        ('overload.arms=["sjf", "sjf+shed+bound"]', "overload.arms[1]"),
        ("overload.overdue_share=0", "overload.overdue_share"),
        ('overload.arms=["sjf", "sjf"]', "overload.arms"),
        ("overload.warmup_s=60", "overload.warmup_s"),
        ('overhead.protocols=["simple", "copy"]', "overhead.protocols[1]"),
        ('overhead.policy="lifo"', "overhead.policy"),
        ("overload.expensive_rows=2000000", "overload.expensive_rows"),
        ("pg.max_connections=100", "pg.max_connections"),
        ('pg.shared_buffers="lots"', "pg.shared_buffers"),
        ("pg.proxy_slice_us=50", "pg.proxy_slice_us"),
    ],
)
def test_a_bad_value_is_refused_by_name(override, key):
    with pytest.raises(SpecError) as e:
        read_spec(EXPERIMENT, [override])
    assert e.value.key == key


def test_an_arm_may_name_its_own_cost_basis():
    spec = read_spec(EXPERIMENT, ['overload.arms=["direct", "sjf", "sjf+cpu", "sjf@auto+cpu"]'])
    assert spec.value.overload.arms[3] == "sjf@auto+cpu"
    assert overload_arm("sjf@auto+cpu") == ("sjf", True, "cpu", False, False)
    assert overload_arm("sjf-aging:2") == ("sjf-aging:2", False, None, False, False)
    assert overload_arm("sjf+cpu+bound") == ("sjf", False, "cpu", True, False)
    assert overload_arm("sjf@auto+bound+shed") == ("sjf", True, None, True, True)


def test_the_file_reads_as_the_pg_kind():
    spec = read_spec(EXPERIMENT)
    assert spec.kind == "pg" and spec.value.overload.loads == [0.5, 0.9, 1.25, 1.5]
    assert "sjf@auto" in spec.value.overload.arms and spec.value.overhead.clients == [1, 64]


def test_the_distinct_script_has_that_many_texts_each_reachable():
    text = pgbench.distinct_script(1_000, 37)
    selects = [x for x in text.splitlines() if x.startswith("SELECT")]
    assert len(selects) == len(set(selects)) == 37
    assert {int(x.split(" AS c")[1].split()[0]) for x in selects} == set(range(37))
    # A binary search: the deepest pick is ceil(log2(37)) = 6 conditions down.
    depth = best = 0
    for line in text.splitlines():
        depth += line.startswith("\\if") - line.startswith("\\endif")
        best = max(best, depth)
    assert best == 6 and depth == 0


def test_pgbench_logs_are_read_and_its_report_file_is_not(tmp_path):
    (tmp_path / "tx.123").write_text("0 1 1500 0 1700000000 500000 200\n1 1 2500 0 1700000001 0 0\n")
    (tmp_path / "tx.123.1").write_text("2 1 skipped 0 1700000001 0 300\n3 1 1000000 0 1700000002 0 999\n")
    (tmp_path / "tx.sql").write_text("SELECT 1;\n")
    (tmp_path / "tx-report.txt").write_text("tps = 1.0 (without initial connection time)\n")
    rows = pgbench.read_log(tmp_path / "tx")
    assert len(rows) == 3
    assert rows[0].latency_s == pytest.approx(0.0015) and rows[0].sched_s == pytest.approx(1700000000.4985)
    assert rows[0].lag_s == pytest.approx(0.0002) and rows[2].latency_s == pytest.approx(1.0)
    rep = pgbench.parse(
        "number of transactions actually processed: 42\ntps = 10.5 (without initial connection time)\n"
        "client 3 aborted in command 1 (SQL) of script 0; ERROR\n",
        2,
        1.0,
    )
    assert (rep.tps, rep.transactions, rep.aborted_clients) == (10.5, 42, 1)


def test_a_schedule_pgbench_never_reached_counts_as_not_served():
    """100 transactions a second over [0, 10): the logs hold the first 5 s (pgbench's clients
    were all busy after that); one of them took longer than the timeout."""
    rows = [pgbench.Row(i / 100, i / 100 + 0.01, 0.01, 0.0) for i in range(500)]
    rows[10] = pgbench.Row(0.1, 7.1, 7.0, 6.9)
    c = classify(rows, (0.0, 10.0), 100.0, 5.0)
    assert c["offered"] == pytest.approx(1000, abs=1.5) and c["served"] == 499
    assert c["served_fraction"] == pytest.approx(0.499, abs=0.001) and c["p99_ms"] is None
    assert c["p50_ms"] is None and c["p99_served_ms"] == pytest.approx(10)
    c = classify(rows[:400], (0.0, 4.0), 100.0, 5.0)
    assert (
        c["offered"] == pytest.approx(400, abs=1.5)
        and c["p50_ms"] == pytest.approx(10)
        and c["p99_ms"] == pytest.approx(10)
    )


def _missing() -> str | None:
    for path, what in (
        (BIN, "the release binary: make build"),
        (Path("/usr/sbin/pgbouncer"), "Debian's pgbouncer: make apt"),
    ):
        if not path.exists():
            return f"{path} missing ({what})"
    try:
        pgbench.pgbench()
    except Exception as e:  # no PostgreSQL binaries
        return f"PostgreSQL missing ({e}): make apt"
    return None


def _check_capacity(cap: dict) -> None:
    """The capacity step's record: the open-loop probes (each script alone, then the mix),
    costed by the database's CPU."""
    assert cap["capacity_tps"] > 0 and cap["gate_capacity_ms"] > 0
    assert set(cap["probes"]["alone"]) == {"cheap", "expensive"}
    for name, probe in cap["probes"]["alone"].items():
        assert probe["completed"][name] > 0 and probe["cpu_s"] > 0, (name, probe)
    assert 0 < cap["probes"]["mix"]["busy"] <= 1.05
    assert cap["service_ms"]["cheap"] < cap["service_ms"]["expensive"]


def _custom_slices() -> bool:
    """Whether this kernel takes a custom scheduler slice (`cpus slice`, Linux 6.12 and later)."""
    argv = [sys.executable, "-m", "shortfirst_lab", "cpus", "slice", "200", "--", "true"]
    return subprocess.run(argv, capture_output=True, timeout=30, cwd=REPO / "lab").returncode == 0


def _check_waits(points: list[dict]) -> None:
    """Every point measured its processes' waits for the CPU: the database's backends, and the
    proxy's threads wherever there is a proxy."""
    for p in points:
        waits = p["cpu_waits"]
        assert waits["database"]["threads"] > 0 and waits["database"]["slices"] > 0, p["arm"]
        if p["arm"] == "direct":
            assert "proxy" not in waits
        else:
            assert waits["proxy"]["slices"] > 0 and waits["proxy"]["wait_us_per_slice"] >= 0, p["arm"]


@pytest.mark.slow
def test_a_tiny_run_end_to_end(tmp_path):
    """Both experiments, a few seconds each: every arm gives transactions/s, every point's
    pgbench logged rows, the gatekeeper's admitted charge is back to 0 after each point, and
    the targets are checked."""
    if (why := _missing()) is not None:
        pytest.skip(why)
    sets = [
        "pg.scale=1",
        'overhead.scripts=["select-only", "distinct"]',
        'overhead.protocols=["extended", "prepared"]',
        "overhead.clients=[4]",
        "overhead.duration_s=1",
        "overhead.distinct_texts=100",
        'overload.arms=["direct", "pgbouncer", "sjf", "fifo@auto"]',
        "overload.loads=[0.5]",
        "overload.duration_s=3",
        "overload.warmup_s=1",
        "overload.capacity_s=1",
        "overload.capacity_probe_s=2",
        "overload.expensive_rows=5000",
        "overload.cheap_clients=4",
        "overload.expensive_clients=4",
        f"pg.proxy_slice_us={200 if _custom_slices() else 0}",
    ]
    argv = [sys.executable, "-m", "shortfirst_lab", "bench", "pg", str(EXPERIMENT), "--pin", "no"]
    argv += ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]
    argv += [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO / "lab")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    points = doc["overhead"]["points"]
    assert len(points) == 2 * 2  # scripts × protocols, one client count
    for p in points:
        for arm in ("direct", "pgbouncer", "gatekeeper", "gatekeeper+pgbouncer"):
            a = p["arms"][arm]
            if "pgbouncer" in arm and p["protocol"] == "prepared":
                assert "skipped" in a
                continue
            assert a["tps"] > 0 and a["logged"] > 0 and a["aborted_clients"] == 0, (p, arm)
            assert a["logged"] == a["transactions"]
        for arm in ("gatekeeper", "gatekeeper+pgbouncer"):
            if "gatekeeper" not in p["arms"][arm]:
                continue
            gate = p["arms"][arm]["gatekeeper"]
            assert gate["admitted_charge_s"] == 0 and gate["in_flight"] == 0 and gate["admitted"] > 0
            assert p["arms"][arm]["proxy_cpu_s"] is not None
    # In front of PgBouncer: both proxies' CPU, the gatekeeper's own part of it.
    chain = next(p for p in points if p["protocol"] == "extended")["arms"]["gatekeeper+pgbouncer"]
    assert 0 < chain["gatekeeper_cpu_us_per_transaction"] < chain["proxy_cpu_us_per_transaction"]
    # The distinct texts reached the gatekeeper as types of their own, up to its table's bound.
    distinct = next(p for p in points if p["script"] == "distinct" and p["clients"] == 4)
    assert distinct["arms"]["gatekeeper"]["gatekeeper"]["types"] > 10
    ol = doc["overload"]
    _check_capacity(ol["capacity"])
    _check_waits(ol["points"])
    assert {p["arm"] for p in ol["points"]} == {"direct", "pgbouncer", "sjf", "fifo@auto"}
    for p in ol["points"]:
        for cls in ("cheap", "expensive"):
            assert p[cls]["logged"] > 0 and p[cls]["aborted_clients"] == 0, (p["arm"], cls)
            # load-pg's clients: what became of every transaction they scheduled.
            assert p[cls]["outcomes"]["ok"] > 0, (p["arm"], cls)
            assert p[cls]["completed_per_s"] > 0, (p["arm"], cls)
        if "gatekeeper" in p:
            assert p["gatekeeper"]["admitted_charge_s"] == 0 and p["gatekeeper"]["types"] >= 2
            # Sampled while the load ran: both types' learned costs.
            during = p["gatekeeper"]["estimated_cost_ms_mean_over_run"]
            assert len(during) == 2 and min(during.values()) > 0
    assert doc["overhead"]["checks"] and doc["overload"]["checks"]
    assert not any(tmp_path.glob("work/overload/*/cheap.log")), (
        "pgbench's report must not be named like its logs"
    )
    if shutil.which("pgrep"):
        assert (
            str(tmp_path)
            not in subprocess.run(["pgrep", "-af", "pgbouncer"], capture_output=True, text=True).stdout
        )


def test_an_auto_arm_is_judged_against_its_policy_with_the_same_basis():
    def point(arm: str, p99: float, goodput: float) -> dict:
        return {
            "load": 1.25,
            "arm": arm,
            "cheap": {"p99_ms": p99, "served_fraction": 1.0},
            "expensive": {"goodput_per_s": goodput},
        }

    points = [point("sjf", 10.0, 50.0), point("sjf+cpu", 20.0, 80.0), point("sjf@auto+cpu", 21.0, 60.0)]
    checks = verdict.overload({"points": points, "settings": {"timeout_s": 5.0}})
    at = "sjf@auto+cpu at 1.25x"
    auto = {c["target"]: c["value"] for c in checks if c["where"] == at and "auto" in c["target"]}
    assert auto == pytest.approx(
        {
            "cheap p99_ms auto / measured capacity, |1 - ratio|": 0.05,
            "expensive goodput_per_s auto / measured capacity, |1 - ratio|": 0.25,
        }
    )


def test_the_expensive_ceiling_is_the_cpu_the_cheap_class_leaves():
    from shortfirst_lab.runners.gatekeeper.pg.overload import expensive_ceiling

    cap = {"service_ms": {"cheap": 0.1, "expensive": 10.0}}
    # The lookups take 0.2 of the CPU; 0.8 / 10 ms = 80 aggregates a second.
    assert expensive_ceiling(cap, {"cheap": 2000.0, "expensive": 100.0}) == pytest.approx(80.0)
    assert expensive_ceiling(cap, {"cheap": 2000.0, "expensive": 50.0}) == pytest.approx(50.0)
    assert expensive_ceiling(cap, {"cheap": 20000.0, "expensive": 50.0}) == 0.0


def test_any_goodput_beats_a_pgbouncer_that_served_none_in_time():
    def point(arm: str, goodput: float) -> dict:
        return {
            "load": 1.5,
            "arm": arm,
            "cheap": {"p99_ms": 10.0, "served_fraction": 1.0},
            "expensive": {"goodput_per_s": goodput},
        }

    points = [point("direct", 0.0), point("pgbouncer", 0.0), point("sjf", 6.4), point("fifo", 0.0)]
    checks = verdict.overload({"points": points, "settings": {"timeout_s": 5.0}})
    goodput = {c["where"]: c for c in checks if c["target"] == "expensive goodput / PgBouncer's"}
    assert goodput["sjf at 1.5x"]["ok"] and goodput["sjf at 1.5x"]["value"] is None
    assert not goodput["fifo at 1.5x"]["ok"]


def test_pgbench_clients_take_no_arm_that_refuses():
    with pytest.raises(SpecError) as e:
        read_spec(EXPERIMENT, ['overload.generator="pgbench"', 'overload.arms=["direct", "sjf+shed"]'])
    assert e.value.key == "overload.arms"


def test_a_point_whose_proxy_died_is_not_compared_with():
    def point(arm: str, goodput: float, **extra) -> dict:
        return {
            "load": 1.5,
            "arm": arm,
            "cheap": {"p99_ms": 10.0, "served_fraction": 1.0},
            "expensive": {"goodput_per_s": goodput},
            **extra,
        }

    points = [point("direct", 0.0), point("pgbouncer", 3.9, proxy_exited=[123]), point("sjf", 6.4)]
    points.append(point("fifo", 50.0, proxy_exited=[456]))
    checks = verdict.overload({"points": points, "settings": {"timeout_s": 5.0}})
    assert not any(c["where"] == "fifo at 1.5x" for c in checks)
    goodput = next(c for c in checks if c["target"] == "expensive goodput / PgBouncer's")
    assert goodput["where"] == "sjf at 1.5x" and goodput["value"] is None and not goodput["ok"]
