"""Render an HTML page in headless Chromium and report which images actually rendered.

A copy of the page gets a small script that, on the window `load` event (which waits for
every image), records each `<img>` that is not `complete` with `naturalWidth > 0` — i.e. an
image the browser failed to decode or fetch — into a marker element. Chromium's `--dump-dom`
prints the DOM after load; the marker is parsed from it. A missing marker is an error too, so
the check cannot pass by accident when the browser did not run the page.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..kit import LabError

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=15000",
)
MARKER_ID = "sf-imgcheck"
_SCRIPT = f"""
<script>
window.addEventListener('load', function () {{
  var imgs = document.images, broken = [];
  for (var i = 0; i < imgs.length; i++) {{
    var im = imgs[i];
    if (!(im.complete && im.naturalWidth > 0)) broken.push(im.alt || im.src.slice(0, 80));
  }}
  var d = document.createElement('pre');
  d.id = '{MARKER_ID}';
  d.textContent = JSON.stringify({{total: imgs.length, broken: broken}});
  document.body.appendChild(d);
}});
</script>
"""
_MARKER_RE = re.compile(rf'<pre id="{MARKER_ID}">(.*?)</pre>', re.S)


class BrowserError(LabError, RuntimeError):
    """Chromium is missing, failed, or did not run the page."""


@dataclass
class ImageCheck:
    total: int
    broken: list[str] = field(default_factory=list)

    @property
    def loaded(self) -> int:
        return self.total - len(self.broken)

    @property
    def ok(self) -> bool:
        return self.total > 0 and not self.broken


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def check_images(page: str | Path, timeout_s: float = 90.0) -> ImageCheck:
    """Load `page` in headless Chromium; return how many images rendered and which did not."""
    page = Path(page)
    chromium = find_chromium()
    if chromium is None:
        raise BrowserError("chromium not found (Debian package `chromium`)")
    text = page.read_text(encoding="utf-8")
    idx = text.lower().rfind("</body>")
    instrumented = text[:idx] + _SCRIPT + text[idx:] if idx >= 0 else text + _SCRIPT
    with tempfile.TemporaryDirectory(prefix="sf-chromium-") as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(instrumented, encoding="utf-8")
        argv = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", "--dump-dom", copy.as_uri()]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            raise BrowserError(f"chromium did not finish within {timeout_s:g} s") from e
    m = _MARKER_RE.search(r.stdout)
    if not m:
        raise BrowserError(
            f"chromium (exit {r.returncode}) did not run the page's load handler; "
            f"stderr: {r.stderr.strip()[-800:]}"
        )
    data = json.loads(html.unescape(m.group(1)))
    return ImageCheck(total=int(data["total"]), broken=list(data["broken"]))
