"""The command lines of our binaries (`shortfirst_lab.commands`): each builder's flags, in
their order, with their units, for the ways the lab calls them."""

from __future__ import annotations

import pytest

from shortfirst_lab import commands


@pytest.mark.parametrize(
    ("kwargs", "argv"),
    [
        ({}, ["sf", "load", "--target", "http://h:1"]),
        (
            {
                "trace": "t.csv",
                "out": "o",
                "speed": 2.5,
                "duration_s": 4.0,
                "timeout_s": 10,
                "threads": 1,
                "quiet": True,
                "realtime": True,
                "extra": ["--spin-us", "2000"],
            },
            [
                "sf",
                "load",
                "--target",
                "http://h:1",
                "--trace",
                "t.csv",
                "--out",
                "o",
                "--speed",
                "2.5",
                "--duration",
                "4.0",
                "--timeout",
                "10",
                "--threads",
                "1",
                "--quiet",
                "--realtime",
                "--spin-us",
                "2000",
            ],
        ),
        (
            {
                "session": "s.toml",
                "model": "closed:5,think=exp:0.7:7",
                "persistent": 100000,
                "seed": 3,
                "out": "o",
                "duration_s": 60.0,
                "timeout_s": 7.0,
                "quiet": True,
            },
            [
                "sf",
                "load",
                "--target",
                "http://h:1",
                "--session",
                "s.toml",
                "--out",
                "o",
                "--model",
                "closed:5,think=exp:0.7:7",
                "--duration",
                "60.0",
                "--persistent",
                "100000",
                "--timeout",
                "7.0",
                "--seed",
                "3",
                "--quiet",
            ],
        ),
        # The lab's runner: target and out, then the experiment's own flags as given.
        (
            {"out": "r", "extra": ["--trace", "t", "--load", "0.5"]},
            ["sf", "load", "--target", "http://h:1", "--out", "r", "--trace", "t", "--load", "0.5"],
        ),
    ],
)
def test_load(kwargs, argv):
    assert commands.load("sf", "http://h:1", **kwargs) == argv


def test_load_refuses_trace_and_session():
    with pytest.raises(ValueError, match="trace or a session"):
        commands.load("sf", "http://h:1", trace="t", session="s")


def test_gatekeeper_spells_units_and_leaves_out_what_is_unset():
    argv = commands.gatekeeper(
        "sf",
        listen="127.0.0.1:1",
        upstream="http://127.0.0.1:2",
        policy="sjf",
        capacity="800ms",
        admin="127.0.0.1:3",
        max_queue_wait_s=6.0004,
        overdue_share=0.6,
        classify=[("search", "^GET /s")],
        max_in_flight=3,
        estimate_basis="serial",
        extra=["--x"],
    )
    assert argv == [
        "sf", "gatekeeper", "--listen", "127.0.0.1:1", "--upstream", "http://127.0.0.1:2",
        "--policy", "sjf", "--capacity", "800ms", "--admin", "127.0.0.1:3",
        "--classify", "search=^GET /s", "--max-in-flight", "3", "--estimate-basis", "serial",
        "--max-queue-wait", "6000ms", "--overdue-share", "0.6", "--x",
    ]  # fmt: skip
    assert commands.gatekeeper("sf", listen="a", upstream="u") == [
        "sf",
        "gatekeeper",
        "--listen",
        "a",
        "--upstream",
        "u",
    ]


def test_calibrate_takes_a_mix_file_or_weighted_paths():
    argv = commands.calibrate(
        "sf",
        upstream="u",
        out="c.json",
        clients=32,
        warmup="2s",
        measure="4s",
        min_capacity="250ms",
        max_capacity="20s",
        refine_steps=0,
        tolerance=-1,
        paths=[("/home", 16.0), ("/best", 0.5)],
    )
    assert argv == [
        "sf", "gatekeeper", "calibrate", "--upstream", "u", "--out", "c.json", "--clients", "32",
        "--warmup", "2s", "--measure", "4s", "--min", "250ms", "--max", "20s", "--refine-steps", "0",
        "--tolerance=-1", "--path", "/home:16", "--path", "/best:0.5",
    ]  # fmt: skip
    with_mix = commands.calibrate(
        "sf", upstream="u", out="o", clients=1, warmup="1s", measure="1s", min_capacity="1ms",
        max_capacity="2ms", mix="mix.csv", max_in_flight=4,
    )  # fmt: skip
    assert with_mix[-4:] == ["--mix", "mix.csv", "--max-in-flight", "4"]


def test_sim_and_the_synthetic_upstream():
    assert commands.sim("sf", policy="srpt", rate=10_000_000, out="d", trace="t.csv") == [
        "sf", "sim", "--policy", "srpt", "--link-rate", "10000000", "--out", "d", "--trace", "t.csv",
    ]  # fmt: skip
    argv = commands.sim("sf", policy="fair", rate="10mbit", out="d", workload="w", jobs=5, seed=1, load=0.9,
                        servers=1, warmup_jobs=0, summary_only=True)  # fmt: skip
    assert argv[8:] == ["--workload", "w", "--jobs", "5", "--seed", "1", "--load", "0.9", "--servers", "1",
                        "--warmup-jobs", "0", "--summary-only"]  # fmt: skip
    assert commands.synthetic_upstream(
        "sf", listen="l", scale=0.25, cpus=4, slots=32, thrash=0.1, write_mix="m.csv"
    ) == ["sf", "gatekeeper", "synthetic-upstream", "--listen", "l", "--scale", "0.25", "--cpus", "4",
          "--slots", "32", "--thrash", "0.1", "--write-mix", "m.csv"]  # fmt: skip


def test_the_bookstore_serves_and_generates():
    assert commands.bookstore_serve("bs", db="postgres://x", listen="l", pool=16) == [
        "bs", "serve", "--db", "postgres://x", "--listen", "l", "--pool", "16",
    ]  # fmt: skip
    argv = commands.bookstore_serve(
        "bs", db="d", listen="l", pool=4, request_log="r.csv", best_sellers_repeat=5
    )
    assert argv[8:] == ["--request-log", "r.csv", "--best-sellers-repeat", "5"]
    assert commands.bookstore_gen("bs", db="d", items=1000, customers=2000, seed=1) == [
        "bs", "gen", "--db", "d", "--items", "1000", "--customers", "2000", "--seed", "1",
    ]  # fmt: skip
