"""The pages a browser experiment loads, written into the server's docroot.

Two sources, by the names an experiment lists in `browser.pages`:

    generated   a page made here from a seed: HTML, two stylesheets, two scripts and
                `GENERATED_IMAGES` PNG images of bounded-Pareto sizes (the heavy tail of a
                page's objects), all of it referenced from the HTML so the browser fetches
                everything before its load event. Deterministic: the same seed, the same bytes.
    rust-book   a local copy of a real documentation page: a chapter of The Rust Programming
                Language as mdBook renders it, with its stylesheets, scripts and web fonts
                (36 requests, 0.71 MB), copied from the Rust toolchain's own documentation
                (`rustc --print sysroot`/share/doc/rust/html/book, the `rust-docs` component
                rustup installs by default).

Every file written is world-readable: the peers' workers run as an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..kit import BROWSER_PAGES, LabError, write_atomic

#: The generated page's images and the bounds and tail index of their sizes.
GENERATED_IMAGES = 16
IMAGE_MIN_BYTES = 8_000
IMAGE_MAX_BYTES = 400_000
IMAGE_ALPHA = 1.1
#: The chapter of the book loaded: a long page of text and code, like a documentation page.
RUST_BOOK_PAGE = "ch04-01-what-is-ownership.html"

_WORDS = (
    "scheduler shortest remaining work first request response bandwidth uplink connection "
    "stream queue latency throughput fairness priority bytes packet server browser page"
).split()


class PageError(LabError, RuntimeError):
    """A page source that cannot be written (the Rust documentation is missing, an unknown name)."""


@dataclass(frozen=True)
class Page:
    """A page in the docroot: its source name and its path on the server."""

    name: str
    path: str


def write_pages(names: tuple[str, ...], docroot: Path, seed: int) -> list[Page]:
    """Writes each named page into `docroot` (replacing an earlier copy); returns them in order."""
    out = []
    for name in names:
        if name == "generated":
            out.append(write_generated(docroot / "page-generated", seed))
        elif name == "rust-book":
            out.append(copy_rust_book(docroot / "book"))
        else:
            raise PageError(f"unknown page source {name!r}: one of {', '.join(BROWSER_PAGES)}")
    return out


def _text(rng: np.random.Generator, n_bytes: int) -> str:
    words = rng.choice(_WORDS, size=max(1, n_bytes // 8))
    return " ".join(words)[:n_bytes]


def image_sizes_bytes(seed: int, n: int = GENERATED_IMAGES) -> list[int]:
    """`n` bounded-Pareto sizes (`IMAGE_ALPHA`, `IMAGE_MIN_BYTES`..`IMAGE_MAX_BYTES`), by inversion."""
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    lo, hi, a = IMAGE_MIN_BYTES, IMAGE_MAX_BYTES, IMAGE_ALPHA
    x = lo / (1.0 - u * (1.0 - (lo / hi) ** a)) ** (1.0 / a)
    return [int(v) for v in x]


def _png(path: Path, rng: np.random.Generator, size_bytes: int) -> None:
    """A PNG of noise (incompressible), of about `size_bytes`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    side = max(8, int((size_bytes / 4.0) ** 0.5))
    plt.imsave(path, rng.random((side, side, 4)), format="png")


def write_generated(root: Path, seed: int) -> Page:
    """The generated page under `root` (`/page-generated/index.html`)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    css = []
    for i, n in enumerate((12_000, 40_000)):
        rules = "\n".join(
            f".c{i}-{k} {{ margin: {k % 7}px; color: #{k % 4096:03x}; }}" for k in range(n // 40)
        )
        write_atomic(root / f"style{i}.css", f"body {{ font-family: serif; }}\n{rules}\n")
        css.append(f'<link rel="stylesheet" href="style{i}.css">')
    js = []
    for i, n in enumerate((30_000, 120_000)):
        body = f"/* {_text(rng, n)} */\nwindow.sfLoaded{i} = true;\n"
        write_atomic(root / f"app{i}.js", body)
        js.append(f'<script src="app{i}.js"></script>')
    imgs = []
    for i, size in enumerate(image_sizes_bytes(seed)):
        _png(root / f"img{i}.png", rng, size)
        imgs.append(f'<p>{_text(rng, 400)}</p>\n<img src="img{i}.png" alt="figure {i}" width="320">')
    html = (
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>generated page</title>\n'
        + "\n".join(css)
        + "\n</head><body>\n<h1>A generated page</h1>\n"
        + "\n".join(imgs)
        + "\n"
        + "\n".join(js)
        + "\n</body></html>\n"
    )
    write_atomic(root / "index.html", html)
    _readable(root)
    return Page("generated", "/page-generated/index.html")


def rust_docs() -> Path:
    """The toolchain's rendered book, or PageError naming what is missing."""
    try:
        sysroot = subprocess.run(
            ["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise PageError(f"rust-book: cannot run `rustc --print sysroot` ({e})") from e
    book = Path(sysroot) / "share" / "doc" / "rust" / "html" / "book"
    if not (book / RUST_BOOK_PAGE).is_file():
        raise PageError(f"rust-book: {book / RUST_BOOK_PAGE} not found (`rustup component add rust-docs`)")
    return book


#: What mdBook's script does on a page with runnable code: ask the Rust playground, on the
#: Internet, for its list of crates. The lab has no Internet (and a page load must not depend
#: on a host outside the testbed), so the copy skips it: its play buttons stay as rendered.
PLAYGROUND_FETCH = "const playgrounds = Array.from(document.querySelectorAll('.playground'));"
PLAYGROUND_OFF = "const playgrounds = [];  /* shortfirst lab: no playground, no Internet */"


def copy_rust_book(root: Path) -> Page:
    """The book copied to `root` (`/book/<chapter>`), its scripts kept from calling the Rust
    playground (`PLAYGROUND_FETCH`)."""
    src = rust_docs()
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(src, root)
    for script in root.glob("book*.js"):
        text = script.read_text()
        if PLAYGROUND_FETCH in text:
            write_atomic(script, text.replace(PLAYGROUND_FETCH, PLAYGROUND_OFF))
    calls = [s.name for s in root.glob("*.js") if "play.rust-lang.org/meta/crates" in s.read_text()]
    if any(PLAYGROUND_OFF not in (root / name).read_text() for name in calls):
        names = ", ".join(calls)
        raise PageError(f"rust-book: {names} call the Rust playground in a way the lab cannot turn off")
    _readable(root)
    return Page("rust-book", f"/book/{RUST_BOOK_PAGE}")


def _readable(root: Path) -> None:
    """Every directory and file under `root` readable by all (and `root`'s parents searchable)."""
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
