"""Tests of the TPC-W experiment driver: metric parsing and analysis on fixed inputs, and a short
end-to-end run of emulated browsers through the gatekeeper into the bookstore on a real PostgreSQL."""

import json
import math
import os
from pathlib import Path

import pytest

from shortfirst_lab import tpcw


def test_parse_metrics_keeps_per_type_series():
    text = "\n".join(
        [
            "# TYPE gatekeeper_type_estimated_cost_seconds gauge",
            'gatekeeper_type_estimated_cost_seconds{type="GET /best_sellers"} 0.120',
            'gatekeeper_type_estimated_cost_seconds{type="GET /home"} 0.0004',
            'gatekeeper_type_requests_total{type="GET /home",outcome="ok"} 7',
            'gatekeeper_type_queue_wait_seconds_bucket{type="GET /home",le="0.001"} 3',
            'gatekeeper_type_queue_wait_seconds_sum{type="GET /home"} 0.5',
            'gatekeeper_type_queue_wait_seconds_count{type="GET /home"} 5',
            "gatekeeper_queue_length 3",
        ]
    )
    m = tpcw.parse_metrics(text)
    assert m[("gatekeeper_type_estimated_cost_seconds", "GET /best_sellers")] == pytest.approx(0.12)
    assert m[("gatekeeper_type_queue_wait_seconds_count", "GET /home")] == 5
    assert not any(k[0].endswith("_bucket") or k[0] == "gatekeeper_type_requests_total" for k in m)
    assert tpcw.type_to_code("GET /best_sellers") == "BESS"
    assert tpcw.type_to_code("GET /nope") is None


def test_analyze_counts_only_successes_inside_the_window(tmp_path: Path):
    header = (
        "id,client,path,size_bytes,bytes_received,status,outcome,attempts,"
        "scheduled_s,start_s,connected_s,first_byte_s,done_s\n"
    )
    rows = [
        "1,0,/home,0,100,200,ok,1,0.5,0.5,0.5,0.6,0.7\n",  # before the warm-up ends: ignored
        "2,0,/home,0,100,200,ok,1,2.0,2.0,2.0,2.1,2.2\n",
        "3,1,/best_sellers,0,100,200,ok,1,3.0,3.0,3.0,3.9,4.0\n",
        "4,1,/home,0,100,502,http_error,1,5.0,5.0,5.0,5.1,5.1\n",
        "5,1,/home,0,0,,failed,1,6.0,6.0,,,\n",
    ]
    p = tmp_path / "requests.csv"
    p.write_text(header + "".join(rows))
    r = tpcw.analyze(p, warmup_s=1.0, end_s=7.0)
    assert r["completed"] == 2
    assert r["failed"] == 1
    assert r["throughput_per_min"] == pytest.approx(2 / 6 * 60)
    assert r["mean_response_s"] == pytest.approx((0.2 + 1.0) / 2)
    assert r["per_interaction_response"]["BESS"]["mean_response_s"] == pytest.approx(1.0)


def test_pages_match_the_session_model():
    text = tpcw.SESSION_FILE.read_text()
    for code, (path, _) in tpcw.PAGES.items():
        assert f'{code} = "{path}"' in text
    assert set(tpcw.CALIBRATION_MIX) == set(tpcw.PAGES)


def _require_stack() -> tpcw.Binaries:
    bins = tpcw.Binaries.default()
    missing = [str(b) for b in (bins.shortfirst, bins.bookstore) if not b.exists()]
    if not any(Path(f"/usr/lib/postgresql/{v}/bin/initdb").exists() for v in (15, 16, 17)):
        missing.append("PostgreSQL server binaries (Debian package postgresql)")
    if missing:
        msg = "needs " + ", ".join(missing) + " (make build bookstore-build apt)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return bins


@pytest.mark.slow
def test_browsers_through_the_gatekeeper_into_the_bookstore(tmp_path: Path):
    bins = _require_stack()
    with tpcw.postgres(max_connections=60) as pg:
        tpcw.generate(bins, pg.url, items=1000, customers=2000, seed=1)
        with tpcw.bookstore(bins, pg.url, tmp_path, pool=16) as app:
            r = tpcw.run_point(
                bins,
                app,
                "sjf",
                "50ms",
                browsers=20,
                think="exp:0.1:1",
                duration_s=8.0,
                warmup_s=1.0,
                seed=3,
                workdir=tmp_path,
            )
    assert r["failed"] == 0, r
    assert r["completed"] >= 100, r
    per = r["per_interaction"]
    for code in ("HOME", "PROD", "SREQ"):
        assert per[code]["count"] > 0, per
        assert per[code]["mean_exec_s"] > 0 and per[code]["mean_wait_s"] >= 0, per[code]
    # The gatekeeper learned a cost per page type, Best Sellers above Home (at this tiny scale and
    # under concurrent load the gap is narrow; the no-load shape is checked by the Rust cost test).
    assert per["HOME"]["learned_cost_s"] > 0, per
    if "learned_cost_s" in per.get("BESS", {}):
        assert per["BESS"]["learned_cost_s"] > per["HOME"]["learned_cost_s"], per
    assert (tmp_path / "sjf-20" / "requests.csv").exists()


def _point(mode, n, tput, rt, learned, admc_rt=None):
    per = {
        "HOME": {
            "count": 10,
            "mean_wait_s": 0.001 * n,
            "mean_exec_s": 0.001,
            "learned_cost_s": learned,
            "mean_response_s": 0.001 * n,
        },
        "SRES": {"count": 5, "mean_wait_s": 0.002 * n, "mean_exec_s": 0.003, "mean_response_s": 0.005},
        "BESS": {
            "count": 2,
            "mean_wait_s": 0.01 * n,
            "mean_exec_s": 0.1,
            "learned_cost_s": 100 * learned,
            "mean_response_s": 0.2,
        },
    }
    if admc_rt is not None:
        per["ADMC"] = {"count": 1, "mean_response_s": admc_rt}
    return {
        "mode": mode,
        "browsers": n,
        "throughput_per_min": tput,
        "mean_response_s": rt,
        "per_interaction": per,
    }


def test_report_draws_figures_and_the_cost_table(tmp_path: Path):
    modes = ("direct", "fifo", "sjf", "sjf-aging:2")
    doc = {
        "environment": {"cpus": [0], "online_cpus": 2, "nice": -5},
        "think_shortening": 10.0,
        "points": [
            point
            for m in modes
            for n in (10, 50)
            for point in [_point(m, n, 100.0 * n, 0.01 * n, 0.0005 * n)]
        ],
    }
    s = tmp_path / "summary.json"
    s.write_text(json.dumps(doc))
    files = tpcw.report(s)
    assert {f.name for f in files} == {
        "tpcw-throughput.png",
        "tpcw-response.png",
        "tpcw-aging.png",
        "tpcw-wait-exec.png",
        "tpcw-table1.md",
        "tpcw-summary.md",
    }
    assert all(f.stat().st_size > 0 for f in files)
    table = (tmp_path / "tpcw-table1.md").read_text()
    # learned / measured at no load (10 browsers) and at peak (50 browsers, the highest throughput),
    # next to the paper's row for the same interaction.
    assert "| Home | 1.83 | 3.22 | 5.0 | 1.0 | 25.0 | 1.0 | 16 |" in table
    assert "| Best Sellers | 1205.01 | 2441.86 | 500.0 | 100.0 | 2500.0 | 100.0 | 5 |" in table
    assert "CPUs [0] of 2, nice -5, think time ÷10" in (tmp_path / "tpcw-summary.md").read_text()


def test_targets_from_points():
    pts = [
        _point("direct", 100, 1000.0, 1.0, 0.001),
        _point("direct", 400, 800.0, 4.0, 0.001),
        _point("fifo", 100, 990.0, 2.0, 0.001, admc_rt=5.0),
        _point("fifo", 400, 980.0, 8.0, 0.001, admc_rt=5.0),
        _point("sjf", 400, 1000.0, 0.5, 0.001, admc_rt=6.5),
    ]
    t = tpcw.targets(pts)
    assert t["throughput_at_highest_load_over_peak"]["direct"]["ratio"] == pytest.approx(0.8)
    assert t["throughput_at_highest_load_over_peak"]["fifo"]["ratio"] == pytest.approx(980 / 990)
    assert t["browsers"] == 400
    assert t["fifo_over_sjf_mean_response"] == pytest.approx(16.0)
    assert t["costliest_sjf_over_fifo"]["ADMC"]["sjf_over_fifo"] == pytest.approx(1.3)
    assert t["costliest_sjf_over_fifo"]["BESS"]["sjf_over_fifo"] == pytest.approx(1.0)


def test_calibration_takes_the_smallest_capacity_near_the_peak():
    trials = [
        {"capacity_us": 100_000, "throughput_per_s": 50.0},
        {"capacity_us": 200_000, "throughput_per_s": 96.0},
        {"capacity_us": 400_000, "throughput_per_s": 100.0},
        {"capacity_us": 800_000, "throughput_per_s": 99.0},
    ]
    assert tpcw.choose_capacity(trials, 0.05) == 200_000
    assert tpcw.choose_capacity(trials, 0.0) == 400_000
    with pytest.raises(tpcw.TpcwError):
        tpcw.choose_capacity([], 0.05)


def test_modes_may_have_their_own_load_points():
    cfg = {
        "load": {"browsers": [10, 20]},
        "modes": {"list": ["sjf", "sjf@auto"], "browsers": {"sjf@auto": [20]}},
    }
    assert tpcw.browsers_for(cfg, "sjf") == [10, 20]
    assert tpcw.browsers_for(cfg, "sjf@auto") == [20]


def _closed_loop_log(path: Path, timeout_s: float) -> None:
    """Two browsers for 100 s: browser 0 gets every response in 0.5 s and thinks 0.5 s; browser 1's
    requests all hit the client timeout, and it thinks 1 s after each; browser 1's last request is
    still in flight when the run ends (at 100 s)."""
    header = (
        "id,client,path,size_bytes,bytes_received,status,outcome,attempts,"
        "scheduled_s,start_s,connected_s,first_byte_s,done_s\n"
    )
    rows, i = [], 0
    for k in range(100):
        s = float(k)
        rows.append(f"{i},0,/home,0,10,200,ok,1,{s},{s},{s},{s + 0.4},{s + 0.5}\n")
        i += 1
    t = 0.0
    while t + timeout_s <= 100.0:
        rows.append(f"{i},1,/best_sellers,0,0,,timeout,1,{t},{t},{t},,{t + timeout_s}\n")
        i += 1
        t += timeout_s + 1.0
    # Still waiting at the end (100 s): shortfirst load drains it and logs it when it ends.
    rows.append(f"{i},1,/best_sellers,0,10,200,ok,1,{t},{t},{t},{t + 1.5},{t + 1.5}\n")
    path.write_text(header + "".join(rows))


def test_analyze_reports_both_accountings_and_littles_law(tmp_path: Path):
    p = tmp_path / "requests.csv"
    _closed_loop_log(p, timeout_s=2.0)
    r = tpcw.analyze(p, warmup_s=0.0, end_s=100.0, timeout_s=2.0)
    # The paper's accounting: successful interactions only; the timeouts are counted apart.
    assert r["completed"] == 100
    assert r["mean_response_s"] == pytest.approx(0.5)
    assert r["timed_out"] == 33
    assert r["in_flight_at_end"] == 1
    assert r["client_timeout_s"] == 2.0
    # The full accounting counts every ended request, a timeout at the timeout.
    full = r["full"]
    assert full["completed"] == 133
    assert full["mean_response_ended_s"] == pytest.approx((100 * 0.5 + 33 * 2.0) / 133)
    # ... and the one still in flight at the end (started at 99 s) with the 1 s it had waited.
    assert full["mean_response_s"] == pytest.approx((100 * 0.5 + 33 * 2.0 + 1.0) / 134)
    assert full["per_interaction"]["BESS"] == {
        "count": 33,
        "mean_response_s": pytest.approx(2.0),
        "timed_out": 33,
    }
    # Little's law: the full accounting accounts for both browsers, successes alone for one and a bit.
    lt = r["little"]
    assert lt["browsers"] == 2
    # Browser 0 waits half the time, browser 1 two thirds of it (the last 1 s too).
    assert lt["mean_waiting"] == pytest.approx((50 + 33 * 2.0 + 1.0) / 100)
    assert lt["n_full"] == pytest.approx(2.0, rel=0.03)
    assert lt["n_paper"] == pytest.approx(100 / 100 * (0.5 + lt["mean_think_s"]))
    assert lt["n_paper"] < 1.5
    assert lt["implied_mean_response_s"] == pytest.approx(full["mean_response_ended_s"], rel=0.03)


def test_analyze_infers_browsers_left_waiting_at_the_end(tmp_path: Path):
    # The load generator does not log a request still in flight when the run ends: browser 1 got
    # its last response at 40 s (then thinks at most 1 s) and browser 2 never got one.
    header = (
        "id,client,path,size_bytes,bytes_received,status,outcome,attempts,"
        "scheduled_s,start_s,connected_s,first_byte_s,done_s\n"
    )
    rows = [
        "0,0,/home,0,10,200,ok,1,50.0,50.0,50.0,50.1,50.2\n",
        "1,0,/home,0,10,200,ok,1,99.5,99.5,99.5,99.6,99.7\n",
        "2,1,/home,0,10,200,ok,1,39.0,39.0,39.0,39.5,40.0\n",
    ]
    p = tmp_path / "requests.csv"
    p.write_text(header + "".join(rows))
    r = tpcw.analyze(p, warmup_s=0.0, end_s=100.0, timeout_s=120.0, browsers=3, think_max_s=1.0)
    assert r["in_flight_at_end"] == 2
    assert r["full"]["mean_response_ended_s"] == pytest.approx((0.2 + 0.2 + 1.0) / 3)
    assert r["full"]["mean_response_s"] == pytest.approx((0.2 + 0.2 + 1.0 + 59.0 + 99.0) / 5)
    assert r["little"]["browsers"] == 3
    assert tpcw.think_max_s("exp:0.7:7") == 7.0
    assert tpcw.think_max_s("const:0") == 0.0
    assert tpcw.think_max_s("uniform:1:2") == math.inf


def test_pg_settings_from_the_experiment_file():
    assert tpcw.PgSettings.from_config({}) == tpcw.PgSettings("256MB", "8MB", None, None)
    assert not tpcw.PgSettings().needs_groups
    assert tpcw.PgSettings.from_config({"read_iops_limit": 200}).needs_groups
    s = tpcw.PgSettings.from_config({"shared_buffers": "32MB", "work_mem": "4MB", "memory_limit_mb": 750})
    assert (s.shared_buffers, s.work_mem, s.memory_limit_mb) == ("32MB", "4MB", 750)
    with pytest.raises(tpcw.TpcwError, match="unknown keys"):
        tpcw.PgSettings.from_config({"memory_limit": 750})
    with pytest.raises(tpcw.TpcwError, match="positive integer"):
        tpcw.PgSettings.from_config({"memory_limit_mb": 0})
    with pytest.raises(tpcw.TpcwError, match="read_iops_limit must be a positive integer"):
        tpcw.PgSettings.from_config({"read_iops_limit": "fast"})


def test_memory_limit_needs_root(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tpcw.os, "geteuid", lambda: 1000)
    with (
        pytest.raises(tpcw.TpcwError, match="need root"),
        tpcw.postgres(settings=tpcw.PgSettings(memory_limit_mb=100)),
    ):
        pass


@pytest.mark.slow
def test_postgres_runs_in_its_own_memory_group_and_removes_it(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a cgroup-v1 memory group")
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        pytest.skip("the cgroup-v1 memory controller is not mounted at /sys/fs/cgroup/memory")
    _require_stack()
    settings = tpcw.PgSettings(
        shared_buffers="16MB", work_mem="1MB", memory_limit_mb=300, read_iops_limit=500
    )
    group = blkio = None
    with (
        pytest.raises(RuntimeError, match="boom"),
        tpcw.postgres(max_connections=20, settings=settings) as pg,
    ):
        group = pg.cgroup
        assert group is not None and group.is_dir()
        assert group.name.startswith(f"shortfirst-tpcw-{os.getpid()}-")
        postmaster = (pg.dir / "data" / "postmaster.pid").read_text().split()[0]
        assert postmaster in (group / "cgroup.procs").read_text().split()
        pg.set_memory_limit(300)
        assert int((group / "memory.limit_in_bytes").read_text()) == 300 * 2**20
        blkio = pg.blkio
        assert blkio is not None and postmaster in (blkio / "cgroup.procs").read_text().split()
        pg.set_read_iops_limit(500)
        assert (blkio / "blkio.throttle.read_iops_device").read_text().split()[1] == "500"
        # Prewarming lifts the read limit meanwhile and puts it back.
        assert pg.prewarm(500) >= 0
        assert (blkio / "blkio.throttle.read_iops_device").read_text().split()[1] == "500"
        snap = pg.snapshot()
        assert snap["mem"]["limit_bytes"] == 300 * 2**20
        assert snap["io"]["reads"] >= 0
        assert snap["db"]["xact_commit"] >= 0
        raise RuntimeError("boom")
    # Removed although the block failed.
    assert group is not None and not group.exists()
    assert blkio is not None and not blkio.exists()
