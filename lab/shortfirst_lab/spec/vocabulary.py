"""The binary's vocabulary, read from the binary: `shortfirst vocabulary` prints, as JSON, the
names this build takes for `serve`'s policies and schedulers (and which policies each
scheduler runs), the simulator's policies and the gatekeeper's admission policies and cost
bases, each list from the definition its parser uses. Read once per process; every check and
builder of the lab asks here, so a name added to the binary needs no change in the lab.

The binary is `kit.shortfirst_binary()` (``$SHORTFIRST_BIN`` or the release build).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from typing import Any

from ..kit import LabError, shortfirst_binary

#: An argument in a form: `X` a number (`sjf-aging:X`), `CUTOFFS` a list of sizes, `N` a count.
_ARGUMENTS = {"X": r"[0-9]*\.?[0-9]+", "CUTOFFS": r"[0-9][0-9A-Za-z.,]*", "N": r"[0-9]+"}


class VocabularyError(LabError):
    """The binary's vocabulary could not be read: no binary, or one that does not list it."""


@functools.cache
def _read() -> dict[str, Any]:
    binary = shortfirst_binary()
    if not binary.is_file():
        raise VocabularyError(
            f"{binary}: no shortfirst binary to read policies and schedulers from; `make build`"
        )
    try:
        out = subprocess.run(
            [str(binary), "vocabulary"], capture_output=True, text=True, timeout=30, check=True
        )
        return json.loads(out.stdout)
    except (subprocess.SubprocessError, json.JSONDecodeError, OSError) as e:
        raise VocabularyError(f"{binary} vocabulary: {e}") from e


def serve_policies(scheduler: str = "kernel") -> tuple[str, ...]:
    """`serve --policy` names that run under `scheduler` (`kernel`: the priority bands)."""
    by = _read()["serve"]["policies_by_scheduler"]
    if scheduler not in by:
        raise VocabularyError(f"scheduler {scheduler!r}: the binary has {', '.join(by)}")
    return tuple(by[scheduler])


def all_serve_policies() -> tuple[str, ...]:
    """Every `serve --policy` name, whichever scheduler runs it."""
    return tuple(_read()["serve"]["policy"])


def schedulers() -> tuple[str, ...]:
    """`serve --scheduler`: who orders the uplink's bytes (kernel bands, the server's pacer,
    or the pacer with Crovella 1999's limit on concurrent writers)."""
    return tuple(_read()["serve"]["scheduler"])


def at_max_connections() -> tuple[str, ...]:
    """What `serve` does at `--max-connections`."""
    return tuple(_read()["serve"]["at_max_connections"])


def max_link_rate_bits_per_s() -> int:
    """Highest `serve --link-rate` a user-space scheduler paces to."""
    return int(_read()["serve"]["max_link_rate_bits_per_s"])


def default_cutoffs_bytes() -> tuple[int, ...]:
    """The cutoffs `serve --policy srpt` uses without `--cutoffs`, bytes."""
    return tuple(int(c) for c in _read()["serve"]["default_cutoffs_bytes"])


def default_data_bands() -> int:
    """The data bands the default cutoffs make: what an uplink's tree needs for them (a tree
    with fewer sends the largest responses' packets to band 0, set-up)."""
    return len(default_cutoffs_bytes()) + 1


def auto_data_bands() -> int:
    """The data bands `serve --cutoffs auto` learns."""
    return int(_read()["serve"]["auto_data_bands"])


def estimate_bases() -> tuple[str, ...]:
    """`gatekeeper --estimate-basis`: what a completion's cost sample measures."""
    return tuple(_read()["gatekeeper"]["estimate_basis"])


def gatekeeper_policy_forms() -> str:
    """The gatekeeper's admission policies as a message lists them: `fifo, sjf or sjf-aging:X`."""
    forms = _read()["gatekeeper"]["policy"]
    return ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else "".join(forms)


def is_gatekeeper_policy(text: str) -> bool:
    """Whether `text` is one of the gatekeeper's admission policies (X a non-negative number;
    the binary bounds it)."""
    return any(_form_re(form).match(text) for form in _read()["gatekeeper"]["policy"])


def _form_re(form: str) -> re.Pattern[str]:
    parts = re.split(r"(X|CUTOFFS|N)$", form)
    return re.compile("^" + re.escape(parts[0]) + (_ARGUMENTS[parts[1]] if len(parts) > 1 else "") + "$")
