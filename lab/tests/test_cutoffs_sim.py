"""The simulated comparison of the kernel bands' cutoffs (`theory.cutoffs`): its page workload
offers what it says, and `serve`'s default cutoffs keep a page ahead of downloads where the
paper's do not (the claim decision 0020 rests on)."""

from __future__ import annotations

import pandas as pd
import pytest
from sim_fixtures import require_binary

from shortfirst_lab.spec import vocabulary
from shortfirst_lab.theory import cutoffs


@pytest.fixture(scope="module", autouse=True)
def binary():
    return require_binary()


def test_the_page_workload_offers_its_load_and_whole_pages(tmp_path):
    trace = tmp_path / "page.csv"
    cutoffs.page_trace(0.8, 7, trace, duration_s=3_000)
    d = pd.read_csv(trace)
    assert d.time_s.is_monotonic_increasing and d.time_s.max() < 3_000
    downloads = d[d.path == "/download"]
    assert downloads.size_bytes.between(100e3, 10e6).all()
    offered = downloads.size_bytes.sum() / 3_000 / cutoffs.RATE_BYTES_PER_S
    assert 0.6 < offered < 1.0, offered  # heavy-tailed: a wide band around 0.8
    pages = d[d.path != "/download"].groupby(d.path.str.split("/").str[1])
    assert len(pages) > 200
    assert (pages.size() == len(cutoffs.PAGE_SIZES_BYTES)).all()
    assert (pages.time_s.nunique() == 1).all(), "a page's resources are asked for at once"


def test_the_candidates_include_the_servers_default():
    default = vocabulary.default_cutoffs_bytes()
    assert cutoffs.candidates()["serve default"] == "srpt-classes:" + ",".join(map(str, default))
    policies = list(cutoffs.candidates().values())
    assert len(set(policies)) == len(policies), "each cutoff list once"
    lists = [p.removeprefix("srpt-classes:") for p in policies if p not in ("ps", "srpt")]
    assert all(x.replace(",", "").isdigit() for x in lists), "in bytes, as the default is spelled"


def test_a_page_among_downloads_finishes_sooner_under_the_default_than_the_papers(tmp_path):
    trace = tmp_path / "page.csv"
    cutoffs.page_trace(0.9, 1, trace, duration_s=1_500)
    cands = cutoffs.candidates()
    cell = {name: cutoffs.page_cell(trace, cands[name], tmp_path / name) for name in cands}
    default, paper = cell["serve default"]["page_median_ms"], cell["paper 1K-50K"]["page_median_ms"]
    exact, fair = cell["exact srpt"]["page_median_ms"], cell["fair"]["page_median_ms"]
    assert exact <= default < paper < fair, cell
    assert default < 1.25 * exact, "the default's bands come close to exact SRPT for the page"
