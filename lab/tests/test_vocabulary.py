"""The lab's names of policies and schedulers come from the binary (`shortfirst vocabulary`)."""

from __future__ import annotations

import pytest

from shortfirst_lab.kit import LabError, shortfirst_binary
from shortfirst_lab.spec import vocabulary

pytestmark = pytest.mark.skipif(not shortfirst_binary().is_file(), reason="no release build (make build)")


def test_serve_names_and_pairings():
    assert vocabulary.schedulers() == ("kernel", "user", "crovella")
    assert vocabulary.serve_policies("kernel") == ("fair", "srpt", "srpt2", "srrt")
    assert vocabulary.serve_policies("user") == ("fair", "srpt", "las")
    assert set(vocabulary.all_serve_policies()) == {"fair", "srpt", "srpt2", "las", "srrt"}
    assert "wait" in vocabulary.at_max_connections()
    assert vocabulary.max_link_rate_bits_per_s() > 10**9
    with pytest.raises(LabError, match="scheduler 'bands'"):
        vocabulary.serve_policies("bands")


@pytest.mark.parametrize(
    ("text", "ok"),
    [("fifo", True), ("sjf", True), ("sjf-aging:2", True), ("sjf-aging:0.5", True), ("sjf-aging", False),
     ("sjf-aging:", False), ("sjf-aging:x", False), ("lifo", False), ("sjf ", False), ("SJF", False)],
)  # fmt: skip
def test_gatekeeper_policies(text, ok):
    assert vocabulary.is_gatekeeper_policy(text) is ok


def test_gatekeeper_forms_and_bases():
    assert vocabulary.gatekeeper_policy_forms() == "fifo, sjf or sjf-aging:X"
    assert vocabulary.estimate_bases() == ("share", "wall", "serial", "cpu")


def test_a_missing_binary_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SHORTFIRST_BIN", str(tmp_path / "nothing"))
    vocabulary._read.cache_clear()
    try:
        with pytest.raises(vocabulary.VocabularyError, match="nothing: no shortfirst binary.*make build"):
            vocabulary.schedulers()
    finally:
        monkeypatch.undo()
        vocabulary._read.cache_clear()
