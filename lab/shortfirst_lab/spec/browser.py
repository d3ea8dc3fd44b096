"""The browser kind: headless Chromium loads real pages over HTTPS from a server behind the
shaped uplink while other clients' downloads load it.

A browser file is a static serving file (every section and key of `experiment.py`, read by
the same `expcheck`: the arms, the loads of the background, its workload, the uplink, the
open-model generator, the run's duration) plus one section that marks the kind::

    [browser]
    pages = ["rust-book", "generated"]  # non-empty, no duplicates: the page sources of
                                        # `testbed.pages` (a copy of a real documentation page,
                                        # a generated heavy-tailed page); loads alternate pages
    protocols = ["h1", "h2"]            # HTTP/1.1 over TLS (the browser with --disable-http2)
                                        # and HTTP/2 over TLS: one more dimension of the matrix
    peers = ["nginx", "h2o"]            # Debian's servers on the same docroot and link
                                        # (`testbed.peers`), each one more arm; default none
    loads_per_cell = 30                 # page loads of each page in each cell, in [1, 1000]
    idle = true                         # also each arm with no background (the idle floor)
    page_timeout_s = 60                 # a load without its load event by then fails
    chromium = "chromium"               # the browser (a name on PATH or a path)
    tls_port = 8443                     # the servers' HTTPS port (the background uses
                                        # server.port, plaintext HTTP/1.1)

The background is `shortfirst load` with the workload's trace at each of `experiment.loads`,
for `run.duration_s`; page loads start after `run.warmup_s`, one at a time, and stop when
each page has `loads_per_cell` or when less than `page_timeout_s` of the background is left.
Loads above 1, schedules, setups, WAN sweeps, client groups and [calibration] belong to other
experiments and are refused here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import BROWSER_PAGES, PEER_SERVERS
from .expcheck import experiment_from_dict, refuse_unrun
from .expmodel import Experiment, RunSpec
from .schema import Field, SpecError, check_table

PROTOCOLS = ("h1", "h2")
#: The most page loads of one page in one cell.
MAX_LOADS_PER_CELL = 1000

FIELDS = {
    "pages": Field("strs", required=True, choices=BROWSER_PAGES),
    "protocols": Field("strs", choices=PROTOCOLS),
    "peers": Field("strs", choices=PEER_SERVERS, empty_ok=True),
    "loads_per_cell": Field("int", lo=1, hi=MAX_LOADS_PER_CELL),
    "idle": Field("bool"),
    "page_timeout_s": Field("number", lo=1, hi=600),
    "chromium": Field("str"),
    "tls_port": Field("int", lo=1, hi=65535),
}


@dataclass(frozen=True)
class BrowserRun:
    """One cell: a server (an arm of `shortfirst serve`, or a peer) over a protocol, with the
    background at `load` (0: idle)."""

    protocol: str
    load: float
    spec: RunSpec | None = None
    peer: str = ""

    @property
    def server_label(self) -> str:
        """`srpt/user`, `fair` (kernel), or a peer's name."""
        return self.peer or (self.spec.arm.label if self.spec else "")

    @property
    def arm_label(self) -> str:
        """The server and the protocol: `srpt/user h2`, `nginx h1`."""
        return f"{self.server_label} {self.protocol}"

    @property
    def run_id(self) -> str:
        """`<server>-<protocol>-load<ρ>` (`idle` at load 0): `srpt-user-h2-load0.80`."""
        server = self.server_label.replace("/", "-")
        point = "idle" if self.load == 0 else f"load{self.load:.2f}"
        return f"{server}-{self.protocol}-{point}"


@dataclass(frozen=True)
class BrowserExperiment:
    """A validated browser file: the static experiment of its other sections, and [browser]."""

    exp: Experiment
    pages: tuple[str, ...]
    protocols: tuple[str, ...] = PROTOCOLS
    peers: tuple[str, ...] = ()
    loads_per_cell: int = 30
    idle: bool = True
    page_timeout_s: float = 60.0
    chromium: str = "chromium"
    tls_port: int = 8443

    @property
    def name(self) -> str:
        return self.exp.name

    def matrix(self) -> list[BrowserRun]:
        """Cells in execution order: by load (idle first), then server, then protocol, so the
        cells compared at a load run back to back."""
        specs = [s for s in self.exp.matrix() if s.repeat == 1]
        loads = ([0.0] if self.idle else []) + list(self.exp.loads)
        runs: list[BrowserRun] = []
        for ld in loads:
            at = [s for s in specs if s.load == (ld or self.exp.loads[0])]
            for spec in at:
                runs += [BrowserRun(p, ld, spec=spec) for p in self.protocols]
            for peer in self.peers:
                runs += [BrowserRun(p, ld, peer=peer) for p in self.protocols]
        return runs


def from_dict(doc: dict[str, Any], path: Path, text: str = "") -> BrowserExperiment:
    """Validates a browser document: `[browser]` here, the rest by the static kind's reader."""
    table = doc.get("browser")
    check_table(path, "browser", table, FIELDS)
    assert isinstance(table, dict)
    for key in ("pages", "protocols", "peers"):
        values = table.get(key, [])
        if len(set(values)) != len(values):
            raise SpecError(path, f"browser.{key}", "no duplicates", values)
    if "calibration" in doc:
        raise SpecError(path, "calibration", "no [calibration] in a browser experiment")
    exp = experiment_from_dict({k: v for k, v in doc.items() if k != "browser"}, path, text)
    _check_fits(path, exp, table)
    return BrowserExperiment(
        exp,
        tuple(table["pages"]),
        tuple(table.get("protocols", PROTOCOLS)),
        tuple(table.get("peers", ())),
        int(table.get("loads_per_cell", 30)),
        bool(table.get("idle", True)),
        float(table.get("page_timeout_s", 60.0)),
        str(table.get("chromium", "chromium")),
        int(table.get("tls_port", 8443)),
    )


def _check_fits(path: Path, exp: Experiment, table: dict[str, Any]) -> None:
    """What a browser experiment does not run: overload, schedules, setups, WAN sweeps, groups."""
    if max(exp.loads) > 1:
        raise SpecError(path, "experiment.loads", "background loads in (0, 1]", list(exp.loads))
    if table.get("tls_port") == exp.server.port:
        raise SpecError(path, "browser.tls_port", f"a port other than server.port ({exp.server.port})")
    refuse_unrun(path, exp, "browser", (("experiment.repeats", exp.repeats > 1),))
