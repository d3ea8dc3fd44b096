"""Published pages: the report pages, figures and large benchmark files of `results/`, kept
out of the main branch so that they do not grow every clone.

**Where they live.** In this repository, on the ref `refs/results/pages` (outside
`refs/heads`, so `git clone` does not fetch it): a chain of commits whose tree mirrors the
repository's paths (`results/tocs-lan/report.html`, …). Publishing adds or replaces files
there with a new commit; nothing on it is ever rewritten, so a commit named once stays valid.

**What main keeps.** `docs/results.md`, each experiment's `summary.json`, provenance and
experiment file, the small per-run summaries, and one manifest, `results/published.json`:
for every published path, the pages commit that holds it, its SHA-256 and size. `fetch`
restores a path from that commit and checks it against the manifest.

**The rule** ([`policy_violations`], run by `make test`): under `results/`, main tracks no
`.html`, `.png` or `.svg` file and no file above [`MAX_TRACKED_BYTES`] (the manifest: none
above [`MAX_MANIFEST_BYTES`]); pages, figures and
JSON results above that size are published instead (`python -m shortfirst_lab results
publish PATH`), raw logs are neither (they stay where the run wrote them).

    python -m shortfirst_lab results publish results/tocs-lan     # after a run or a report
    python -m shortfirst_lab results fetch results/tocs-lan       # the page as it was published
    python -m shortfirst_lab results fetch                        # every published file
    python -m shortfirst_lab results check                        # the rule, on the index

A fresh clone first fetches the ref: `git fetch origin refs/results/pages:refs/results/pages`
(`fetch` tries that itself when the commit is missing).

Must not know: the testbed, the runners, what a page contains.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..kit import REPO, LabError, write_atomic, write_json

#: The ref that holds the published files.
PAGES_REF = "refs/results/pages"
#: The manifest main tracks, relative to the repository.
MANIFEST = Path("results") / "published.json"
#: The largest file main may track under results/.
MAX_TRACKED_BYTES = 512 * 1024
#: The largest the manifest may grow: it is what main must track to fetch the rest, about 260
#: bytes a published file, so this is some 30,000 files; past it, the manifest wants a form
#: that does not list every file.
MAX_MANIFEST_BYTES = 8 * 1024 * 1024
#: Kinds of file that are always published, never tracked on main.
PAGE_SUFFIXES = (".html", ".png", ".svg")
#: The most files one publish takes (a directory with more is a mistake, not a report).
MAX_FILES = 10_000


class PagesError(LabError, RuntimeError):
    """A publish or fetch that cannot go on; the message names the path or the commit."""


def _git(repo: Path, args: list[str], *, env: dict[str, str] | None = None) -> bytes:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, env=env, timeout=120, check=False)
    if r.returncode != 0:
        raise PagesError(f"git {' '.join(args[:3])}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def _relative(repo: Path, path: Path) -> str:
    full = (path if path.is_absolute() else Path.cwd() / path).resolve()
    try:
        rel = full.relative_to(repo.resolve())
    except ValueError:
        raise PagesError(f"{path}: not inside the repository {repo}") from None
    if not rel.parts or rel.parts[0] != "results":
        raise PagesError(f"{path}: only files under results/ are published")
    return rel.as_posix()


def is_page(rel: str, size_bytes: int) -> bool:
    """Whether a file under results/ is published: a page or figure, or a JSON result too
    large for main. Raw logs (`requests.csv`, process logs) are neither: they stay local."""
    return rel.endswith(PAGE_SUFFIXES) or (rel.endswith(".json") and size_bytes > MAX_TRACKED_BYTES)


def pages_under(repo: Path, paths: Iterable[Path]) -> list[str]:
    """The files to publish among `paths` (files, or directories searched recursively)."""
    found: set[str] = set()
    for p in paths:
        full = p if p.is_absolute() else Path.cwd() / p
        if not full.exists():
            raise PagesError(f"{p}: no such file or directory")
        files = [full] if full.is_file() else [f for f in full.rglob("*") if f.is_file()]
        for f in files:
            rel = _relative(repo, f)
            if rel != MANIFEST.as_posix() and is_page(rel, f.stat().st_size):
                found.add(rel)
        if len(found) > MAX_FILES:
            raise PagesError(f"{p}: more than {MAX_FILES} files to publish; is it the right path?")
    return sorted(found)


def read_manifest(repo: Path = REPO) -> dict[str, dict]:
    path = repo / MANIFEST
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise PagesError(f"{path}: not JSON ({e})") from e
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise PagesError(f"{path}: expected an object with a `files` object")
    return files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def publish(paths: Iterable[Path], repo: Path = REPO, message: str | None = None) -> str | None:
    """Commit the pages among `paths` to [`PAGES_REF`] and record them in the manifest;
    returns the new commit, or None when there was nothing to publish. The files stay in
    the working tree (untracked on main)."""
    rels = pages_under(repo, list(paths))
    if not rels:
        return None
    parent_sha = _git(repo, ["rev-parse", PAGES_REF]).decode().strip() if _exists(repo, PAGES_REF) else ""
    with tempfile.TemporaryDirectory(prefix="pages-index.") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if parent_sha:
            _git(repo, ["read-tree", parent_sha], env=env)
        entries = {}
        for rel in rels:
            blob = _git(repo, ["hash-object", "-w", "--", rel]).decode().strip()
            _git(repo, ["update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}"], env=env)
            f = repo / rel
            entries[rel] = {"sha256": _sha256(f), "bytes": f.stat().st_size}
        tree = _git(repo, ["write-tree"], env=env).decode().strip()
    text = message or f"publish {len(rels)} files under {os.path.commonpath(rels)}"
    args = ["commit-tree", tree, "-m", text] + (["-p", parent_sha] if parent_sha else [])
    commit = _git(repo, args).decode().strip()
    _git(repo, ["update-ref", PAGES_REF, commit] + ([parent_sha] if parent_sha else []))
    files = read_manifest(repo)
    for rel, e in entries.items():
        files[rel] = {"commit": commit, **e}
    write_json(repo / MANIFEST, {"ref": PAGES_REF, "files": dict(sorted(files.items()))})
    return commit


def _exists(repo: Path, rev: str) -> bool:
    """Whether `rev` names an object in `repo`."""
    r = subprocess.run(["git", "cat-file", "-e", rev], cwd=repo, capture_output=True, check=False)
    return r.returncode == 0


def fetch(paths: Iterable[Path] = (), repo: Path = REPO) -> list[str]:
    """Restore the published files under `paths` (all of them when empty) from their
    commits, checked against the manifest; returns the paths written."""
    files = read_manifest(repo)
    wanted = [_relative(repo, p) for p in paths]
    chosen = {
        rel: e
        for rel, e in files.items()
        if not wanted or any(rel == w or rel.startswith(w.rstrip("/") + "/") for w in wanted)
    }
    if wanted and not chosen:
        raise PagesError(f"nothing published under {', '.join(wanted)} ({MANIFEST} lists {len(files)} files)")
    missing = sorted({e["commit"] for e in chosen.values() if not _exists(repo, f"{e['commit']}^{{commit}}")})
    if missing:
        subprocess.run(
            ["git", "fetch", "--quiet", "origin", f"{PAGES_REF}:{PAGES_REF}"],
            cwd=repo,
            capture_output=True,
            timeout=300,
            check=False,
        )
        still = [c for c in missing if not _exists(repo, f"{c}^{{commit}}")]
        if still:
            raise PagesError(
                f"commit {still[0][:12]} of {PAGES_REF} is not in this clone: "
                f"git fetch origin {PAGES_REF}:{PAGES_REF}"
            )
    for rel, e in sorted(chosen.items()):
        data = _git(repo, ["cat-file", "blob", f"{e['commit']}:{rel}"])
        if hashlib.sha256(data).hexdigest() != e["sha256"]:
            raise PagesError(f"{rel} in {e['commit'][:12]}: SHA-256 differs from {MANIFEST}; nothing written")
        write_atomic(repo / rel, data)
    return sorted(chosen)


def policy_violations(repo: Path = REPO) -> list[str]:
    """Files under results/ that main's index tracks against the rule (see module docs)."""
    out = _git(repo, ["ls-files", "-z", "--", "results"]).decode()
    bad = []
    for rel in filter(None, out.split("\0")):
        f = repo / rel
        size = f.stat().st_size if f.exists() else 0
        if rel == MANIFEST.as_posix():
            if size > MAX_MANIFEST_BYTES:
                bad.append(f"{rel} ({size} bytes > {MAX_MANIFEST_BYTES}): the manifest outgrew its bound")
            continue
        if is_page(rel, size) or size > MAX_TRACKED_BYTES:
            why = "a page" if rel.endswith(PAGE_SUFFIXES) else f"{size} bytes > {MAX_TRACKED_BYTES}"
            how = f"python -m shortfirst_lab results publish {rel}"
            bad.append(f"{rel} ({why}): publish it ({how}) and untrack it")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab results",
        description=f"publish report pages, figures and large files of results/ to {PAGES_REF}, "
        "fetch them back, check what main tracks",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish", help="commit the pages under PATHs to the pages ref, record them")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("-m", "--message", help="the pages commit's message")
    f = sub.add_parser("fetch", help="restore published files (all when no PATH)")
    f.add_argument("paths", nargs="*", type=Path)
    sub.add_parser("check", help="fail if main tracks a page or a large file under results/")
    a = ap.parse_args(argv)
    if a.cmd == "publish":
        commit = publish(a.paths, message=a.message)
        print(f"published to {PAGES_REF} at {commit}; {MANIFEST} updated" if commit else "nothing to publish")
    elif a.cmd == "fetch":
        for rel in fetch(a.paths):
            print(rel)
    else:
        bad = policy_violations()
        for line in bad:
            print(line)
        return 1 if bad else 0
    return 0
