"""The browser experiment's parts without a browser or a testbed: its file (what it runs, what
it refuses), the generated page, the DevTools pipe's framing and the report's arithmetic on
page loads with known answers."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from shortfirst_lab.analysis import browserreport
from shortfirst_lab.kit import REPO
from shortfirst_lab.spec.reader import read_spec
from shortfirst_lab.spec.schema import SpecError
from shortfirst_lab.testbed import chromium, pages

BROWSER_TOML = REPO / "lab" / "experiments" / "browser.toml"


def test_the_experiment_file_runs_every_server_protocol_and_load_idle_first():
    b = read_spec(BROWSER_TOML).value
    runs = b.matrix()
    servers = [*b.exp.arm_labels(), *b.peers]
    assert len(runs) == len(servers) * len(b.protocols) * (1 + len(b.exp.loads))
    assert [r.load for r in runs[: len(servers) * 2]] == [0.0] * len(servers) * 2
    assert runs[0].run_id == "fair-user-h1-idle"
    assert {r.run_id for r in runs} >= {"srpt-user-h2-load0.80", "nginx-h1-load0.95", "srpt-h2-idle"}
    assert len({r.run_id for r in runs}) == len(runs)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (("experiment.loads=[1.2]", 'experiment.arms=["fair"]'), "experiment.loads"),
        ('browser.pages=["generated","generated"]', "browser.pages"),
        ('browser.pages=["nope"]', "browser.pages"),
        ('browser.peers=["apache"]', "browser.peers"),
        ("browser.tls_port=8080", "browser.tls_port"),
        ("browser.loads_per_cell=0", "browser.loads_per_cell"),
        ("experiment.repeats=2", "experiment.repeats"),
    ],
)
def test_the_file_refuses_what_a_browser_experiment_does_not_run(override, key):
    overrides = list(override) if isinstance(override, tuple) else [override]
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        read_spec(BROWSER_TOML, overrides)


def test_a_run_of_our_arms_alone_takes_no_peers():
    b = read_spec(BROWSER_TOML, ["browser.peers=[]", 'experiment.arms=["fair", "srpt"]']).value
    assert b.peers == ()
    assert {r.server_label for r in b.matrix()} == {"fair", "srpt"}
    with pytest.raises(SpecError, match=r"browser\.pages: expected a non-empty list"):
        read_spec(BROWSER_TOML, ["browser.pages=[]"])


def test_the_generated_page_is_deterministic_and_heavy_tailed(tmp_path):
    a = pages.write_generated(tmp_path / "a", seed=3)
    b = pages.write_generated(tmp_path / "b", seed=3)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a == b and a.path == "/page-generated/index.html"
    html = (tmp_path / "a" / "index.html").read_text()
    # Everything the page has is referenced from its HTML, so the load event waits for it.
    for name in files:
        if name != "index.html":
            assert f'"{name}"' in html, name
    sizes = pages.image_sizes_bytes(3)
    assert all(pages.IMAGE_MIN_BYTES <= s <= pages.IMAGE_MAX_BYTES for s in sizes)
    assert max(sizes) > 4 * sorted(sizes)[len(sizes) // 2]  # a heavy tail: the largest dwarfs the median
    assert oct(os.stat(tmp_path / "a" / "img0.png").st_mode & 0o777) == "0o644"


def test_an_unknown_page_source_is_named(tmp_path):
    with pytest.raises(pages.PageError, match="unknown page source 'x'"):
        pages.write_pages(("x",), tmp_path, 1)


def _serve_pipe(replies: list[list[bytes]]) -> tuple[chromium.Pipe, threading.Thread, list[bytes]]:
    """A Pipe whose 'browser' is a thread: it reads each command, answers it with the chunks
    of its entry in `replies` (written apart), and exits after the last."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    got: list[bytes] = []

    def browser() -> None:
        buf = b""
        with os.fdopen(to_r, "rb", buffering=0) as inp, os.fdopen(from_w, "wb", buffering=0) as out:
            for reply in replies:
                while b"\0" not in buf:
                    buf += inp.read(4096)
                msg, buf = buf.split(b"\0", 1)
                got.append(msg)
                for chunk in reply:
                    out.write(chunk)
                    time.sleep(0.01)

    t = threading.Thread(target=browser, daemon=True)
    t.start()
    return chromium.Pipe(to_w, from_r), t, got


def test_the_pipe_matches_replies_by_id_across_events_and_split_writes():
    event = json.dumps({"method": "Page.frameNavigated", "params": {}}).encode() + b"\0"
    reply = json.dumps({"id": 1, "result": {"targetId": "T"}}).encode() + b"\0"
    # The event, then the reply cut in two writes: one message may span reads.
    pipe, _, got = _serve_pipe([[event + reply[:7], reply[7:]]])
    result = pipe.call("Target.createTarget", {"url": "about:blank"}, None, time.monotonic() + 5)
    assert result == {"targetId": "T"}
    assert json.loads(got[0]) == {"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}}


def test_a_protocol_error_and_a_closed_pipe_are_browser_errors():
    err = json.dumps({"id": 1, "error": {"message": "No target"}}).encode() + b"\0"
    pipe, t, _ = _serve_pipe([[err]])
    with pytest.raises(chromium.BrowserError, match="Target.attachToTarget: No target"):
        pipe.call("Target.attachToTarget", {}, None, time.monotonic() + 5)
    t.join(5)
    with pytest.raises(chromium.BrowserError, match="closed its DevTools pipe"):
        pipe.call("Page.enable", {}, None, time.monotonic() + 5)


def _write_cell(out: Path, run_id: str, loads: list[dict]) -> None:
    d = out / "runs" / run_id
    d.mkdir(parents=True)
    (d / "pageloads.jsonl").write_text("".join(json.dumps(x) + "\n" for x in loads))
    (d / "run.json").write_text(json.dumps({"status": "ok"}))


def _load(page: str, proto: str, load_ms: float) -> dict:
    return {"page": page, "index": 0, "protocol": proto, "response_end_ms": 10.0,
            "dom_content_loaded_ms": load_ms / 2, "load_event_ms": load_ms, "fcp_ms": 50.0,
            "lcp_ms": 60.0, "html_bytes": 1000, "resources": [{"body_bytes": 500}]}  # fmt: skip


def test_the_report_sets_srpt_against_the_idle_floor_and_every_server(tmp_path):
    overrides = ['experiment.arms=["fair", "srpt"]', "experiment.loads=[0.8]", 'browser.pages=["generated"]',
                 'browser.peers=["nginx"]', 'browser.protocols=["h2"]']  # fmt: skip
    spec = read_spec(BROWSER_TOML, overrides)
    (tmp_path / "experiment.toml").write_text(spec.value.exp.source)
    idle = {"fair": 1000.0, "srpt": 1100.0, "nginx": 900.0}
    busy = {"fair": 5000.0, "srpt": 1000.0, "nginx": 3000.0}
    for server, ms in idle.items():
        _write_cell(
            tmp_path, f"{server}-h2-idle", [_load("generated", "h2", ms), _load("generated", "h2", ms + 20)]
        )
    for server, ms in busy.items():
        # A warm-up load (left out), three over HTTP/2, one over HTTP/1.1, one failed.
        rows = [
            {"warmup": True, **_load("generated", "h2", 99_999.0)},
            *[_load("generated", "h2", ms)] * 3,
        ] + [
            _load("generated", "http/1.1", 1.0),
            {"page": "generated", "error": "x"},
        ]
        _write_cell(tmp_path, f"{server}-h2-load0.80", rows)
    summary = browserreport.build(tmp_path, with_figures=False)
    cell = next(c for c in summary["cells"] if c["run"] == "srpt-h2-load0.80")
    page = cell["pages"]["generated"]
    # The load over HTTP/1.1 is not the cell's protocol: counted apart, left out.
    assert (page["loads"], page["failed"], page["other_protocol"]) == (3, 1, 1)
    assert page["page_bytes"] == 1500
    comp = next(c for c in summary["comparisons"] if c["load"] == 0.8)
    assert comp["floor_ms"] == pytest.approx(910.0)  # the best idle median of any server
    assert comp["floor_ratio"] == pytest.approx(1000.0 / 910.0)
    assert comp["speedups"] == {"fair": pytest.approx(5.0), "nginx": pytest.approx(3.0)}
    met = {(t["key"]): t["met"] for t in summary["targets"] if t["load"] == 0.8}
    assert met["median load event ÷ idle floor"] is True
    assert met["speedup vs fair"] is True and met["speedup vs nginx"] is True
    assert met["background throughput ÷ FAIR's"] is None  # no background logs here
    assert (tmp_path / "report.html").exists()
    assert "srpt h2" not in browserreport.format_table(summary).splitlines()[0]
