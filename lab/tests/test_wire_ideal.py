"""The wire-accurate ideal: the wire-cost model, its calibration against a counted byte total,
and the report path from raw logs (`report DIR --resimulate`) through a stand-in simulator."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import requests_frame, write_run_dir

from shortfirst_lab import __main__ as cli
from shortfirst_lab.analysis import wire
from shortfirst_lab.spec import vocabulary
from shortfirst_lab.spec.experiment import Arm, load_experiment, run_dir_name

FAKE_SIM = Path(__file__).parent / "fakes" / "fake_sim.py"
H, SEG, C = 260, 66, 250  # head, per-segment header, per-connection control bytes

# (body bytes, segments of body + head, wire bytes): by hand, MSS 1448.
COST_ROWS = [
    (0, 1, 0 + H + 1 * SEG + C),  # the head alone: one segment, 576
    (1, 1, 1 + H + 1 * SEG + C),  # 577
    (1448 - H, 1, 1448 + SEG + C),  # body and head fill one segment exactly: 1764
    (1448 - H + 1, 2, 1449 + 2 * SEG + C),  # one byte more: a second segment, 1831
    (1448, 2, 1448 + H + 2 * SEG + C),  # 2090
    (100_000, 70, 100_000 + H + 70 * SEG + C),  # 100,260 / 1448 = 69.2 → 70 segments: 105,130
]


@pytest.mark.parametrize(("size", "segments", "expected"), COST_ROWS)
def test_wire_cost_by_hand(size: int, segments: int, expected: int):
    m = wire.WireModel(H, C, SEG)
    assert m.cost([size])[0] == expected
    assert m.cost_bytes([size])[0] == expected
    assert m.data_cost([size])[0] == expected - C
    assert expected == size + H + segments * SEG + C


@pytest.mark.parametrize(
    ("counted", "expected_c"),
    [
        (sum(r[2] for r in COST_ROWS), C),  # the count the hand rows add up to: C back
        (sum(r[2] - C for r in COST_ROWS), 0.0),  # headers explain it all: no control bytes
        (sum(r[2] - C for r in COST_ROWS) - 600, 0.0),  # fewer bytes than the data: never < 0
        (None, 0.0),  # no count: uncalibrated
    ],
)
def test_calibration_of_control_bytes(counted: int | None, expected_c: float):
    sizes = [r[0] for r in COST_ROWS]
    m = wire.calibrate(sizes, H, counted)
    assert m.control_bytes == pytest.approx(expected_c)
    if counted is not None and expected_c > 0:
        assert m.cost(sizes).sum() == pytest.approx(counted)


@pytest.mark.parametrize(
    ("generator", "expected"),
    [
        ({"wire_bytes_received": 1000 + 3 * H, "bytes_received": 1000, "completed": 3}, H),
        ({"bytes_received": 1000, "completed": 3}, None),  # an older generator: no wire count
        ({"wire_bytes_received": 1000, "bytes_received": 1000, "completed": 0}, None),
    ],
)
def test_head_bytes_from_the_generator(generator: dict, expected: float | None):
    assert wire.head_bytes(generator) == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"uplink.json": {"total": {"bytes": 5000}, "bands": [{"band": 1, "bytes": 1}]}},
            (5000, "uplink.json"),
        ),
        (
            {"uplink.json": {"bands": [{"band": 0, "bytes": 10}, {"band": 1, "bytes": 20}]}},
            (30, "uplink.json"),
        ),
        ({"health.csv": "t_s,band_bytes.0,band_bytes.1\n0,0,0\n1,5,7\n2,9,11\n"}, (20, "health.csv")),
        ({}, (None, None)),
    ],
)
def test_counted_bytes_prefers_the_uplinks_total(tmp_path: Path, files: dict, expected: tuple):
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    assert wire.counted_bytes(tmp_path) == expected


# --------------------------------------------------------------------------- the report path

WIRE_TOML = """\
[experiment]
name = "synthetic-wire"
description = "synthetic logs for the wire ideal"
arms = ["fair", "srpt", "srpt/user"]
loads = [0.9]
seed = 3

[workload]
kind = "surge"
files = 100
requests = 400

[run]
duration_s = 100
warmup_s = 10
"""
SIZES = 100 * (1 + np.arange(400) % 13) ** 3  # 100 B .. 219.7 KB; 0.25 s apart, no queue at 10 Mbit/s


@pytest.fixture
def wire_dir(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "wire-exp"
    out.mkdir()
    (out / "experiment.toml").write_text(WIRE_TOML)
    counted = int(wire.WireModel(H, C, SEG).cost(SIZES).sum())
    for label in ("fair", "srpt", "srpt/user"):
        arm = Arm(*label.split("/")) if "/" in label else Arm(label)
        record = {"policy": arm.policy, "load": 0.9, "repeat": 1, "seed": 3}
        if arm.scheduler != "kernel":
            record["scheduler"] = arm.scheduler
        rdir = out / "runs" / run_dir_name(arm.policy, 0.9, 1, scheduler=arm.scheduler)
        rt = 3 * (0.01 + 8 * SIZES / 10e6)
        gen = {"wire_bytes_received": int(SIZES.sum()) + H * SIZES.size, "bytes_received": int(SIZES.sum()),
               "completed": SIZES.size}  # fmt: skip
        ids = np.arange(SIZES.size) + 1000  # measured ids need not be row numbers
        write_run_dir(rdir, requests_frame(SIZES, rt, scheduled_s=np.arange(400) * 0.25, ids=ids),
                      record=record, generator=gen)  # fmt: skip
        (rdir / "uplink.json").write_text(json.dumps({"total": {"bytes": counted}}))
    fake = tmp_path / "shortfirst"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SIM} "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return out, fake


def test_report_resimulate_gives_the_wire_ideal(wire_dir: tuple[Path, Path]):
    out, fake = wire_dir
    assert cli.main(["report", str(out), "--resimulate", "--bin", str(fake)]) == 0
    s = json.loads((out / "summary.json").read_text())
    rate = load_experiment(out / "experiment.toml").uplink.rate_bits_per_s
    window = (np.arange(400) * 0.25 >= 10) & (np.arange(400) * 0.25 < 100)
    wire_cost = wire.WireModel(H, C, SEG).cost(SIZES)
    for rdir in sorted((out / "runs").iterdir()):
        a = json.loads((rdir / "analysis.json").read_text())
        mod, fit = a["models"], a["models"]["wire"]
        assert fit["control_bytes"] == pytest.approx(C) and fit["head_bytes"] == pytest.approx(H)
        assert fit["model_over_counted"] == pytest.approx(1.0)
        # First come, first served without a queue: each request takes its service time.
        assert mod["simulated_s"] == pytest.approx(float(np.mean(SIZES[window] * 8 / rate)))
        assert mod["wire_simulated_s"] == pytest.approx(float(np.mean(np.rint(wire_cost[window]) * 8 / rate)))
        # The wire ideal is not the payload ideal: the link carries more than the bodies.
        assert mod["wire_simulated_s"] > 1.05 * mod["simulated_s"]
        assert a["measured_over_wire_ideal"] < a["measured_over_ideal"]
        sim = pd.read_csv(rdir / "sim-wire" / "requests.csv").sort_values("id")
        assert sim["id"].tolist() == list(range(1000, 1400))
        assert (sim["size_bytes"].to_numpy() == SIZES).all()  # the body, for per-size views
        assert (sim["bytes_received"].to_numpy() == SIZES).all()
        assert (sim["wire_bytes"].to_numpy() == np.rint(wire_cost)).all()
    for a in s["arm_comparisons"]:
        assert a["measured_over_wire_ideal"] < a["measured_over_ideal"]
    assert all("measured_over_wire_ideal" in r for r in s["runs"])
    assert "measured ÷ wire ideal" in (out / "report.html").read_text()


def test_size_classes_still_decide_by_the_body(wire_dir: tuple[Path, Path]):
    out, fake = wire_dir
    cli.main(["report", str(out), "--resimulate", "--bin", str(fake)])
    kernel = out / "runs" / "srpt-load0.90-rep1" / "sim-wire" / "summary.json"
    pol = json.loads(kernel.read_text())["policy"]
    cutoffs = list(vocabulary.default_cutoffs_bytes())  # the server's default, body bytes
    expected = [int(x) for x in np.rint(wire.WireModel(H, C, SEG).cost(cutoffs))]
    assert pol == "srpt-classes:" + ",".join(map(str, expected))
    user = json.loads((out / "runs" / "srpt-user-load0.90-rep1" / "sim-wire" / "summary.json").read_text())
    assert user["policy"] == "srpt"
