"""Published pages (`python -m shortfirst_lab results`): publish to the pages ref, fetch back
in the same repository and in a fresh clone, refuse what does not match the manifest, and
the rule on what main tracks under results/ — checked on this repository too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shortfirst_lab.__main__ import main
from shortfirst_lab.analysis import pages
from shortfirst_lab.kit import REPO


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "lab@example.invalid")
    git(r, "config", "user.name", "lab")
    exp = r / "results" / "exp"
    (exp / "figures").mkdir(parents=True)
    (exp / "summary.json").write_text('{"a": 1}\n')
    (exp / "report.html").write_text("<html>page</html>\n")
    (exp / "figures" / "f.png").write_bytes(b"\x89PNG fake")
    (r / "results" / "bench-big.json").write_bytes(b"[" + b"0," * pages.MAX_TRACKED_BYTES + b"0]")
    git(r, "add", "results/exp/summary.json")
    git(r, "commit", "-q", "-m", "summary")
    return r


def test_publish_then_fetch_restores_every_file(repo):
    commit = pages.publish([repo / "results"], repo=repo)
    assert commit and git(repo, "rev-parse", pages.PAGES_REF) == commit
    listed = git(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
    assert listed == ["results/bench-big.json", "results/exp/figures/f.png", "results/exp/report.html"]
    files = pages.read_manifest(repo)
    assert set(files) == set(listed) and all(e["commit"] == commit for e in files.values())
    originals = {rel: (repo / rel).read_bytes() for rel in listed}
    for rel in listed:
        (repo / rel).unlink()
    assert pages.fetch([repo / "results" / "exp"], repo=repo) == listed[1:]
    assert not (repo / "results" / "bench-big.json").exists()
    assert pages.fetch([], repo=repo) == listed
    assert {rel: (repo / rel).read_bytes() for rel in listed} == originals
    # The summary is main's: never published.
    assert "results/exp/summary.json" not in files


def test_a_second_publish_keeps_the_first_and_chains(repo):
    first = pages.publish([repo / "results" / "exp"], repo=repo)
    (repo / "results" / "exp" / "report.html").write_text("<html>new</html>\n")
    second = pages.publish([repo / "results" / "exp" / "report.html"], repo=repo)
    assert git(repo, "rev-parse", f"{second}^") == first
    files = pages.read_manifest(repo)
    assert files["results/exp/report.html"]["commit"] == second
    assert files["results/exp/figures/f.png"]["commit"] == first
    assert git(repo, "show", f"{first}:results/exp/report.html") == "<html>page</html>"


def test_a_fresh_clone_fetches_the_ref_itself(repo, tmp_path):
    pages.publish([repo / "results"], repo=repo)
    git(repo, "add", str(pages.MANIFEST))
    git(repo, "commit", "-q", "-m", "manifest")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    has_ref = subprocess.run(["git", "rev-parse", "--verify", "--quiet", pages.PAGES_REF], cwd=clone)
    assert has_ref.returncode != 0
    assert pages.fetch([], repo=clone) == sorted(pages.read_manifest(repo))
    assert (clone / "results" / "exp" / "report.html").read_text() == "<html>page</html>\n"


def test_a_file_that_does_not_match_the_manifest_is_not_written(repo):
    pages.publish([repo / "results" / "exp"], repo=repo)
    doc = json.loads((repo / pages.MANIFEST).read_text())
    doc["files"]["results/exp/report.html"]["sha256"] = "0" * 64
    (repo / pages.MANIFEST).write_text(json.dumps(doc))
    (repo / "results" / "exp" / "report.html").write_text("local")
    with pytest.raises(pages.PagesError, match="SHA-256 differs"):
        pages.fetch([repo / "results" / "exp" / "report.html"], repo=repo)
    assert (repo / "results" / "exp" / "report.html").read_text() == "local"


def test_paths_outside_results_and_unknown_paths_are_refused(repo, tmp_path):
    (repo / "notes.html").write_text("x")
    with pytest.raises(pages.PagesError, match="only files under results/"):
        pages.publish([repo / "notes.html"], repo=repo)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "page.html").write_text("x")
    with pytest.raises(pages.PagesError, match="not inside the repository"):
        pages.publish([outside], repo=repo)
    with pytest.raises(pages.PagesError, match="nothing published under results/nope"):
        pages.fetch([repo / "results" / "nope"], repo=repo)
    assert pages.publish([repo / "results" / "exp" / "summary.json"], repo=repo) is None


def test_the_rule_names_each_tracked_page_and_large_file(repo):
    assert pages.policy_violations(repo) == []
    git(repo, "add", "results/exp/report.html", "results/bench-big.json")
    bad = pages.policy_violations(repo)
    assert [b.split(" ")[0] for b in bad] == ["results/bench-big.json", "results/exp/report.html"]
    assert "results publish results/exp/report.html" in bad[1]


def test_the_manifest_has_a_bound_of_its_own(repo):
    """Main must track the manifest to fetch the rest: the size rule for results does not move
    it to the pages ref, its own bound does apply."""
    manifest = repo / pages.MANIFEST
    manifest.write_bytes(b" " * (pages.MAX_TRACKED_BYTES + 1))
    git(repo, "add", str(pages.MANIFEST))
    assert pages.policy_violations(repo) == []
    manifest.write_bytes(b" " * (pages.MAX_MANIFEST_BYTES + 1))
    assert [b.split(" ")[0] for b in pages.policy_violations(repo)] == [pages.MANIFEST.as_posix()]


def test_this_repository_tracks_no_page_under_results():
    assert pages.policy_violations(REPO) == []


def test_the_verb_reports_a_bad_path_in_one_line(capsys):
    assert main(["results", "publish", "/nonexistent/x.html"]) == 2
    err = capsys.readouterr().err
    assert "no such file or directory" in err and len(err.strip().splitlines()) == 1
