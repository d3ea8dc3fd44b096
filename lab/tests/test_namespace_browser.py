"""A browser experiment in namespaces, end to end: `python -m shortfirst_lab run` on a small
browser experiment (the generated page, `serve --policy srpt` under the user-space pacer
over HTTP/2, idle and with the background at load 0.5 on a 10 Mbit/s uplink), through the
same runner, Chromium driver and report as lab/experiments/browser.toml.

Checked from the raw logs: every page load ended over HTTP/2 with every object of the page;
the loads under the background started after its warm-up and before its end; the background
ran (its requests completed); and the summary holds both cells, with the idle floor.

Needs root and Chromium: skipped with a message otherwise. About 50 s.
"""

from __future__ import annotations

import json

import pytest
from conftest import BIN, NEEDS_ROOT

from shortfirst_lab.__main__ import main
from shortfirst_lab.analysis.browsercheck import find_chromium
from shortfirst_lab.testbed import pages

pytestmark = [
    *NEEDS_ROOT,
    pytest.mark.skipif(find_chromium() is None, reason="needs chromium (`make apt` installs it)"),
]

EXPERIMENT = """
[experiment]
name = "browser-test"
arms = ["srpt/user"]
loads = [0.5]

[browser]
pages = ["generated"]
protocols = ["h2"]
loads_per_cell = 2
page_timeout_s = 8

[uplink]
rate = "10mbit"
congestion_control = "reno"

[workload]
kind = "bpareto:1.1,100000,2000000"
files = 100
requests = 2000
seed = 7

[client]
timeout_s = 20

[run]
duration_s = 22
warmup_s = 2
drain_timeout_s = 25
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run `make build` (make test does it)")
    d = tmp_path_factory.mktemp("browser")
    (d / "browser-test.toml").write_text(EXPERIMENT)
    assert main(["run", str(d / "browser-test.toml"), "--out", str(d / "out"), "--bin", str(BIN)]) == 0
    return d / "out"


def _loads(out, name):
    rdir = out / "runs" / name
    rec = json.loads((rdir / "run.json").read_text())
    assert rec["status"] == "ok" and rec["failed_loads"] == 0, rec
    lines = [json.loads(line) for line in (rdir / "pageloads.jsonl").read_text().splitlines()]
    assert [x.get("warmup", False) for x in lines[:1]] == [True]  # one page, one warm-up load
    return rdir, lines[1:]


@pytest.mark.parametrize("name", ["srpt-user-h2-idle", "srpt-user-h2-load0.50"])
def test_every_page_load_ends_over_http2_with_the_whole_page(out, name):
    _, loads = _loads(out, name)
    # Idle: both loads. Under the background, as many as fit before a page timeout of it is
    # left (loads_per_cell at most).
    assert len(loads) == 2 if name.endswith("idle") else 1 <= len(loads) <= 2
    n_objects = 4 + pages.GENERATED_IMAGES  # two stylesheets, two scripts, the images
    for load in loads:
        assert load["protocol"] == "h2"
        objects = [r for r in load["resources"] if not r["url"].endswith("/favicon.ico")]
        assert len(objects) == n_objects and all(r["body_bytes"] > 0 for r in objects)
        assert 0 < load["response_end_ms"] <= load["load_event_ms"]


def test_the_background_loads_the_uplink_while_pages_load(out):
    rdir, loads = _loads(out, "srpt-user-h2-load0.50")
    assert all(2 <= load["start_s"] <= 22 - 8 for load in loads)
    summary = json.loads((rdir / "summary.json").read_text())
    assert summary["completed"] > 0


def test_the_summary_has_both_cells_and_the_floor(out):
    summary = json.loads((out / "summary.json").read_text())
    assert [c["run"] for c in summary["cells"]] == ["srpt-user-h2-idle", "srpt-user-h2-load0.50"]
    busy = summary["cells"][1]
    assert busy["background"]["completed"] > 0
    comp = next(c for c in summary["comparisons"] if c["load"] == 0.5)
    assert comp["floor_ms"] == summary["cells"][0]["pages"]["generated"]["load_event_ms"]["median"]
    assert comp["floor_ratio"] is not None and comp["floor_ratio"] > 0
    assert (out / "report.html").exists()
