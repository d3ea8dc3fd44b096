"""`shortfirst load-pg` against a real PostgreSQL (slow): every scheduled transaction is
logged once; a refusal by the gatekeeper does not end a client; a timeout cancels the
statement on the server; the closed loop runs back to back. And (quick) how the overload
bench reads its log."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.runners.gatekeeper.backends.postgres import pg_bin, postgres
from shortfirst_lab.runners.gatekeeper.pg import loadpg
from shortfirst_lab.runners.gatekeeper.pg.arms import gate_state, pg_gatekeeper


def test_the_bench_reads_every_outcome_and_serves_only_the_ok(tmp_path):
    (tmp_path / "transactions.csv").write_text(
        "id,client,scheduled_s,start_s,done_s,outcome,sqlstate\n"
        "0,1,100.000000,100.000100,100.002000,ok,\n"
        "1,2,100.500000,100.500200,100.501000,error,53400\n"
        "2,,101.000000,,106.000000,skipped,\n"
        "3,0,101.500000,101.600000,106.500000,timeout,\n"
    )
    rows = loadpg.read_log(tmp_path)
    assert [r.sched_s for r in rows] == [100.0, 100.5, 101.0, 101.5]
    assert rows[0].latency_s == pytest.approx(0.002) and rows[0].lag_s == pytest.approx(0.0001)
    assert all(math.isinf(r.latency_s) for r in rows[1:])
    assert rows[2].lag_s == pytest.approx(5.0)  # never sent: it waited to the end


def _missing() -> str | None:
    if not BIN.exists():
        return f"{BIN} missing: make build"
    try:
        pg_bin()
    except Exception as e:  # no PostgreSQL binaries
        return f"PostgreSQL missing ({e}): make apt"
    return None


def _load(url: str, script: Path, out: Path, *args: str) -> dict:
    argv = [str(BIN), "load-pg", "--url", url, "--script", str(script), "--out", str(out), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


def _rows(out: Path) -> list[dict]:
    with open(out / "transactions.csv", newline="") as f:
        return list(csv.DictReader(f))


def _psql(url: str, sql: str) -> str:
    argv = [str(pg_bin() / "psql"), url, "-tAc", sql]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def pg():
    if (why := _missing()) is not None:
        pytest.skip(why)
    with postgres(max_connections=100) as server:
        yield server


@pytest.mark.slow
def test_refusals_do_not_end_a_client_and_every_arrival_is_logged(pg, tmp_path):
    script = tmp_path / "sleep.sql"
    script.write_text("\\set ms random(15, 25)\nSELECT pg_sleep(:ms / 1000.0);\n")
    # One 20 ms transaction at a time fits; 150/s offered: most wait past 50 ms and are refused.
    with pg_gatekeeper(
        BIN, pg.url, tmp_path / "gk.log", policy="sjf", capacity="25ms", max_queue_wait_s=0.05, patience="off"
    ) as gate:
        s = _load(gate.url, script, tmp_path / "out", "--rate", "150", "--clients", "16", "--duration", "3s")
        state = gate_state(gate.admin_port)
    rows = _rows(tmp_path / "out")
    assert sorted(int(r["id"]) for r in rows) == list(range(s["scheduled"]))
    assert 350 < s["scheduled"] < 550
    refused = [r for r in rows if r["outcome"] == "error"]
    ok = [r for r in rows if r["outcome"] == "ok"]
    assert refused and {r["sqlstate"] for r in refused} == {"53400"}
    assert s["outcomes"]["error"] == len(refused) and s["sqlstates"] == {"53400": len(refused)}
    # Every client was refused and went on: each has transactions done after its first refusal.
    for client in {r["client"] for r in refused}:
        first = min(float(r["done_s"]) for r in refused if r["client"] == client)
        assert any(r["client"] == client and float(r["done_s"]) > first for r in ok), client
    assert 40 * 3 * 0.6 < len(ok) <= 50 * 3 + 5  # about one 20 ms transaction at a time
    assert state["admitted_charge_s"] == 0 and state["rejected"] == len(refused)


@pytest.mark.slow
def test_a_timeout_cancels_the_statement_on_the_server(pg, tmp_path):
    script = tmp_path / "long.sql"
    script.write_text("SELECT pg_sleep(30);\n")
    s = _load(
        pg.url,
        script,
        tmp_path / "out",
        "--rate",
        "20",
        "--clients",
        "2",
        "--duration",
        "1s",
        "--timeout",
        "200ms",
    )
    rows = _rows(tmp_path / "out")
    assert s["scheduled"] == len(rows) > 5
    # A CancelRequest names a session, not a statement: one that lands as the session starts
    # its next statement cancels that one instead (PostgreSQL's protocol; libpq's too).
    raced = [r for r in rows if r["outcome"] == "error"]
    assert all(r["sqlstate"] == "57014" for r in raced) and len(raced) <= 2
    assert {r["outcome"] for r in rows} <= {"timeout", "skipped", "error"} and s["cancel_unanswered"] <= 1
    for r in rows:
        if r["outcome"] == "timeout":
            assert float(r["done_s"]) - float(r["scheduled_s"]) == pytest.approx(0.2, abs=1e-3)
    # The generator ended within seconds of its schedule, so the 30 s sleeps were cancelled.
    assert (
        _psql(pg.url, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%'") == "0"
    )


@pytest.mark.slow
def test_every_arrival_is_logged_when_the_server_goes_away(pg, tmp_path):
    script = tmp_path / "sleep.sql"
    script.write_text("SELECT pg_sleep(0.01);\n")
    out = tmp_path / "out"
    with pg_gatekeeper(
        BIN, pg.url, tmp_path / "gk.log", policy="sjf", capacity="100ms", patience="off"
    ) as gate:
        argv = [str(BIN), "load-pg", "--url", gate.url, "--script", str(script), "--out", str(out)]
        proc = subprocess.Popen(
            [*argv, "--rate", "200", "--clients", "4", "--duration", "2s", "--timeout", "1s"],
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)
        os.kill(gate.pid, signal.SIGKILL)  # every connection breaks; none can be reopened
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    s = json.loads((out / "summary.json").read_text())
    rows = _rows(out)
    assert sorted(int(r["id"]) for r in rows) == list(range(s["scheduled"])) and s["scheduled"] > 300
    assert s["outcomes"]["ok"] > 100 and s["outcomes"]["lost"] + s["outcomes"]["dropped"] > 100
    assert "not reopened" in err


@pytest.mark.slow
def test_the_closed_loop_runs_back_to_back(pg, tmp_path):
    script = tmp_path / "one.sql"
    script.write_text("\\set n random(1, 1000)\nSELECT :n::int + 1;\n")
    s = _load(pg.url, script, tmp_path / "out", "--clients", "3", "--duration", "1s")
    rows = _rows(tmp_path / "out")
    assert s["model"] == "closed" and s["outcomes"]["ok"] == len(rows) > 100
    for client in ("0", "1", "2"):
        mine = sorted((float(r["scheduled_s"]), float(r["done_s"])) for r in rows if r["client"] == client)
        # Each starts when the one before it ended.
        assert all(b[0] >= a[1] - 1e-5 for a, b in zip(mine, mine[1:], strict=False))


@pytest.mark.slow
def test_a_script_it_cannot_run_is_refused_before_connecting(tmp_path):
    if not BIN.exists():
        pytest.skip(f"{BIN} missing: make build")
    script = tmp_path / "bad.sql"
    script.write_text("SELECT 1;\n\\sleep 10 ms\n")
    argv = [str(BIN), "load-pg", "--url", "postgres://nobody@127.0.0.1:1/x", "--script", str(script)]
    proc = subprocess.run(
        [*argv, "--duration", "1s", "--out", str(tmp_path / "o")], capture_output=True, text=True
    )
    assert proc.returncode != 0 and f"{script}:2: unsupported meta-command \\sleep" in proc.stderr
    assert not (tmp_path / "o").exists()
