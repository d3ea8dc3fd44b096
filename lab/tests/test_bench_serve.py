"""`make bench-serve` (bench/serve.py): which servers run with which arguments, and the
summary's ratios (shortfirst against nginx, srrt against srpt) from per-round results."""

from pathlib import Path

import pytest
from conftest import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/serve.py", "bench_serve")


def _run(server, path, rps, p99_ms, cpu_us, rnd=1):
    return {
        "server": server,
        "file": path,
        "round": rnd,
        "requests_per_s": rps,
        "latency_ms": {"p50": p99_ms / 4, "p90": p99_ms / 2, "p99": p99_ms},
        "server_cpu_us_per_request": cpu_us,
    }


def test_srrt_runs_in_kernel_mode_beside_srpt(bench, tmp_path):
    servers = bench.setup_servers(Path("/bin/shortfirst"), tmp_path, "40gbit", bench.server_names("40gbit"))
    assert list(servers) == ["nginx", "shortfirst", "shortfirst-user", "shortfirst-srrt"]
    srrt, srpt = servers["shortfirst-srrt"][0], servers["shortfirst"][0]
    # The same command but the policy: kernel bands (no --scheduler), same threads and log.
    assert srrt[srrt.index("--policy") + 1] == "srrt" and "--scheduler" not in srrt

    def same(argv):  # without the values that differ per server: port, log file, policy
        skip = {i + 1 for i, a in enumerate(argv) if a in ("--listen", "--access-log", "--policy")}
        return [a for i, a in enumerate(argv) if i not in skip and a != "--policy"]

    assert same(srrt) == same(srpt)
    assert len({port for _, port in servers.values()}) == 4


def test_a_subset_of_servers(bench, tmp_path):
    servers = bench.setup_servers(
        Path("/bin/shortfirst"), tmp_path, "40gbit", ["shortfirst", "shortfirst-srrt"]
    )
    assert list(servers) == ["shortfirst", "shortfirst-srrt"]


@pytest.mark.parametrize(
    "names", [["nginx", "shortfirst", "shortfirst-srrt"], ["shortfirst", "shortfirst-srrt"]]
)
def test_summary_compares_srrt_with_srpt(bench, names):
    runs = []
    for path in bench.FILES:
        for rnd, (srpt_cpu, srrt_cpu) in enumerate(((20.0, 22.0), (30.0, 33.0), (10.0, 14.0)), 1):
            runs.append(_run("shortfirst", path, 1000.0, 2.0, srpt_cpu, rnd))
            runs.append(_run("shortfirst-srrt", path, 900.0, 2.5, srrt_cpu, rnd))
            runs.append(_run("nginx", path, 800.0, 4.0, 25.0, rnd))
    runs = [r for r in runs if r["server"] in names]
    summary = bench.summarize(runs, {n: None for n in names})
    for path in bench.FILES:
        s = summary[path]["srrt_vs_srpt"]
        # Medians over rounds: srpt 20 us, srrt 22 us per request.
        assert s["ratio_server_cpu_per_request"] == pytest.approx(1.1)
        assert s["extra_server_cpu_us_per_request"] == pytest.approx(2.0)
        assert s["ratio_requests_per_s"] == pytest.approx(0.9) and s["ratio_p99"] == pytest.approx(1.25)
        assert ("ratio_requests_per_s" in summary[path]) == ("nginx" in names)
        if "nginx" in names:
            assert summary[path]["ratio_requests_per_s"] == pytest.approx(1.25)
            assert summary[path]["target_met"] is True


def test_summary_without_srrt_has_no_comparison(bench):
    runs = [_run(n, p, 1000.0, 2.0, 20.0) for n in ("nginx", "shortfirst") for p in bench.FILES]
    summary = bench.summarize(runs, {"nginx": None, "shortfirst": None})
    assert all("srrt_vs_srpt" not in s for s in summary.values())
