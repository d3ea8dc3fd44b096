"""The HTTPS half of `make bench-serve`: h2load's report parsed from captured output (one
run by request count over HTTP/2, one in timing mode over HTTP/1.1, both against `serve`
over TLS), and the summary's ratios and targets from per-server runs."""

from pathlib import Path

import pytest

from shortfirst_lab.kit import KitError, parse_h2load
from shortfirst_lab.runners import tlsbench

DATA = Path(__file__).parent / "data"


def test_h2load_by_request_count():
    r = parse_h2load((DATA / "h2load-h2-requests.txt").read_text())
    assert r["duration_s"] == pytest.approx(0.02907)
    assert r["requests_per_s"] == 6879.24
    assert r["requests"] == {
        "total": 200,
        "started": 200,
        "done": 200,
        "succeeded": 200,
        "failed": 0,
        "errored": 0,
        "timeout": 0,
    }
    assert r["status_2xx"] == 200
    assert r["bytes"] == {"total": 216472, "headers": 7952, "data": 204800}
    assert r["bytes_per_s"] == pytest.approx(216472 / 0.02907, rel=1e-3)
    assert (r["tls_protocol"], r["application_protocol"]) == ("TLSv1.3", "h2")
    assert r["cipher"] == "TLS_AES_128_GCM_SHA256"


def test_h2load_timing_mode_counts_the_main_duration_only():
    r = parse_h2load((DATA / "h2load-h1-timing.txt").read_text())
    # "finished in 1.50s" includes the 0.5 s warm-up; the rate and traffic total do not.
    assert r["duration_s"] == 1.0
    assert r["bytes_per_s"] == 16797090.0
    assert r["application_protocol"] == "http/1.1"


def test_h2load_without_a_report_is_an_error():
    with pytest.raises(KitError, match="cannot parse h2load"):
        parse_h2load("starting benchmark...\nspawning thread #0: 4 total client(s).\n")


def _run(server, proto, path, asked, rps, bps, cpu_per_gb, connections=None, failure=None):
    return {
        "server": server,
        "protocol": proto,
        "file": path,
        "connections_asked": asked,
        "connections": connections or asked,
        "requests_per_s": rps,
        "bytes_per_s": bps,
        "server_cpu_s_per_gb": cpu_per_gb,
        "failure": failure,
    }


def test_summary_against_the_better_peer_and_nginx():
    runs = [
        _run("nginx", "h2", "1k.bin", 64, 10_000, 1e7, 40.0),
        _run("h2o", "h2", "1k.bin", 64, 20_000, 2e7, 20.0),
        _run("shortfirst-user", "h2", "1k.bin", 64, 15_000, 1.5e7, 44.0),
        _run("nginx", "h1", "10m.bin", 10_000, None, None, None, failure="killed"),
        _run("nginx", "h1", "10m.bin", 10_000, 30, 3e8, 1.2, connections=5000),
        _run("h2o", "h1", "10m.bin", 10_000, 40, 4e8, 1.0),
        _run("shortfirst-user", "h1", "10m.bin", 10_000, 37, 3.7e8, 1.5),
    ]
    s = tlsbench.summarize(runs)
    small = s["h2/1k.bin/64"]
    assert small["ratio_requests_per_s_vs_best_peer"] == 0.75  # against h2o's 20,000
    assert small["ratio_server_cpu_per_gb_vs_nginx"] == 1.1
    assert (small["target_requests_met"], small["target_cpu_met"]) == (False, True)
    big = s["h1/10m.bin/10000"]
    assert big["nginx"]["connections"] == 5000
    assert big["nginx"]["failures"] == [{"connections": 10_000, "why": "killed"}]
    assert big["ratio_bytes_per_s_vs_best_peer"] == 0.925
    assert (big["target_transfer_met"], big["target_cpu_met"]) == (True, False)


def test_summary_without_our_figures_has_no_ratio():
    runs = [
        _run("nginx", "h1", "1k.bin", 64, 10_000, 1e7, 40.0),
        _run("shortfirst-user", "h1", "1k.bin", 64, None, None, None, failure="not run: no body"),
    ]
    row = tlsbench.summarize(runs)["h1/1k.bin/64"]
    assert "ratio_requests_per_s_vs_best_peer" not in row
    assert row["shortfirst-user"]["failures"] == [{"connections": 64, "why": "not run: no body"}]


def test_a_cell_never_asks_fewer_requests_than_connections():
    s = tlsbench.TlsSettings(scale=0.5)
    argv = tlsbench.h2load_argv(443, "h2", "/1k.bin", 10_000, s)
    assert "-n30000" in argv and "-c10000" in argv and "-m8" in argv and "--h1" not in argv
    argv = tlsbench.h2load_argv(443, "h1", "/100k.bin", 20_000, s)
    assert "-n20000" in argv and "-m1" in argv and "--h1" in argv


def test_the_floor_is_measured_but_never_a_peer():
    runs = [
        _run("nginx", "h2", "1k.bin", 64, 10_000, 1e7, 40.0),
        _run("h2o", "h2", "1k.bin", 64, 20_000, 2e7, 20.0),
        _run("shortfirst-user", "h2", "1k.bin", 64, 15_000, 1.5e7, 44.0),
        _run(tlsbench.FLOOR, "h2", "1k.bin", 64, 30_000, 3e7, 10.0),
    ]
    row = tlsbench.summarize(runs)["h2/1k.bin/64"]
    assert row["ratio_requests_per_s_vs_best_peer"] == 0.75  # h2o's, not the floor's 30,000
    assert row["ratio_requests_per_s_vs_floor"] == 0.5
    assert row["ratio_best_peer_requests_per_s_vs_floor"] == pytest.approx(0.667)


def test_the_floor_runs_over_http2_only(tmp_path):
    servers = tlsbench.tls_servers(
        Path("/bin/serve"), tmp_path, tmp_path / "www", (tmp_path / "c", tmp_path / "k"), [1, 2, 3, 4, 5], [],
        floor=Path("/bin/h2_floor"),
    )  # fmt: skip
    floor = servers[-1]
    assert (floor.name, floor.port, floor.protocols) == (tlsbench.FLOOR, 5, ("h2",))
    assert floor.argv[0] == "/bin/h2_floor" and "--root" in floor.argv
    assert all(s.protocols == ("h1", "h2") for s in servers[:-1])
    cert_key = (tmp_path / "c", tmp_path / "k")
    plain = tlsbench.tls_servers(Path("/bin/serve"), tmp_path, tmp_path, cert_key, [1, 2, 3, 4], [])
    assert [s.name for s in plain] == ["nginx", "h2o", tlsbench.OURS]


def test_an_idle_connection_is_seen_open_without_waiting_for_its_timeout():
    import socket
    import time

    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
        t0 = time.monotonic()
        assert tlsbench.still_open(client)  # nothing to read: open, at once
        assert time.monotonic() - t0 < 1
        server.sendall(b"x")
        time.sleep(0.1)
        assert tlsbench.still_open(client)  # bytes to read: open
        server.close()
        client.recv(1)
        time.sleep(0.1)
        assert not tlsbench.still_open(client)  # the peer closed it
        client.close()


def test_rounds_count_by_their_median_and_a_failed_round_is_left_out():
    runs = [
        _run("nginx", "h2", "1k.bin", 64, 10_000, 1e7, 40.0) | {"round": 1},
        _run("nginx", "h2", "1k.bin", 64, 30_000, 3e7, 20.0) | {"round": 2},
        _run("nginx", "h2", "1k.bin", 64, 20_000, 2e7, 30.0) | {"round": 3},
        _run("shortfirst-user", "h2", "1k.bin", 64, 15_000, 1.5e7, 44.0) | {"round": 1},
        _run("shortfirst-user", "h2", "1k.bin", 64, None, None, None, failure="killed") | {"round": 2},
        _run("shortfirst-user", "h2", "1k.bin", 64, 25_000, 2.5e7, 30.0) | {"round": 3},
    ]
    row = tlsbench.summarize(runs)["h2/1k.bin/64"]
    assert row["nginx"]["requests_per_s"] == 20_000
    assert row["nginx"]["requests_per_s_per_round"] == [10_000, 30_000, 20_000]
    assert row["shortfirst-user"]["requests_per_s"] == 20_000  # the two rounds that counted
    assert row["shortfirst-user"]["failures"] == [{"connections": 64, "why": "killed"}]
    assert row["ratio_requests_per_s_vs_best_peer"] == 1.0


def test_rounds_beyond_the_bound_are_refused(tmp_path):
    with pytest.raises(KitError, match="rounds"):
        tlsbench.run_servers([], tmp_path, tlsbench.TlsSettings(), print, rounds=tlsbench.MAX_ROUNDS + 1)
