"""The report opens in headless Chromium with every figure rendered (and a broken one is caught)."""

from __future__ import annotations

import base64
import io

import pytest

from shortfirst_lab.analysis import report
from shortfirst_lab.analysis.browsercheck import check_images, find_chromium

pytestmark = pytest.mark.skipif(
    find_chromium() is None, reason="chromium not installed (Debian package chromium)"
)


def _png() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def test_report_renders_every_image(experiment_dir):
    report.build(experiment_dir)
    res = check_images(experiment_dir / "report.html")
    assert res.total == 8  # the 7 of test_report plus measured vs simulated vs analytic
    assert res.broken == []
    assert res.ok


def test_broken_image_is_detected(tmp_path):
    good = _png()
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body>"
        f'<img alt="good" src="data:image/png;base64,{good}">'
        '<img alt="corrupt" src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB">'
        '<img alt="missing" src="no-such-file.png">'
        "</body></html>"
    )
    res = check_images(page)
    assert res.total == 3
    assert sorted(res.broken) == ["corrupt", "missing"]
    assert not res.ok
