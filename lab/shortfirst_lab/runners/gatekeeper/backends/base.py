"""What the gatekeeper harness needs of a backend, whatever serves behind the gate: the
command that serves it on a port, when it is ready, the gatekeeper's classification of its
requests and their types, the request mix a calibration offers it, and how long it may take
to stop. `serve` starts one and stops it when its block ends.

Implementations: `synthetic` (`shortfirst gatekeeper synthetic-upstream`), `foreign`
(datasette, json-server) and `bookstore` (the TPC-W bookstore over `postgres`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....kit import Child, LabError, free_port, wait_http, wait_port


class GatekeeperError(LabError, RuntimeError):
    """A backend, the gatekeeper or the load generator that failed to start or to run, a bad
    setting, or a run without a usable result."""


class Backend:
    """A backend the gatekeeper goes in front of. Subclasses give `argv`; the rest has
    defaults: ready once it accepts connections, no classification of the gatekeeper's own
    (it classifies by path), no flags of its own."""

    name = "backend"
    #: Path that answers 200 once the backend serves; None: accepting connections is enough.
    ready_path: str | None = None
    ready_timeout_s = 30.0
    #: Grace between SIGTERM and SIGKILL when the backend is stopped.
    stop_timeout_s = 10.0

    def argv(self, port: int) -> list[str]:
        """The command that serves the backend on 127.0.0.1:`port`."""
        raise NotImplementedError

    def gate_flags(self) -> dict[str, Any]:
        """Keyword arguments of `commands.gatekeeper` and `commands.calibrate` this backend
        needs (its classification rules, a concurrency cap, a cost-sample basis)."""
        return {}

    def calibration_mix(self) -> dict[str, Any]:
        """The mix `shortfirst gatekeeper calibrate` offers it: `paths` or `mix` of
        `commands.calibrate`."""
        raise NotImplementedError

    def type_of(self, path: str) -> str:
        """A request's type from its path (as the gatekeeper classifies it)."""
        return path.split("?", 1)[0]


@dataclass(frozen=True)
class Served:
    """A running backend: its URL, port and process id."""

    url: str
    port: int
    pid: int


@contextmanager
def serve(backend: Backend, log: Path) -> Iterator[Served]:
    """Starts `backend` on a free port with its output in `log`, waits until it is ready and
    stops exactly that process when the block ends (or when it never became ready)."""
    port = free_port()
    with Child(backend.argv(port), log, stop_timeout_s=backend.stop_timeout_s) as child:
        url = f"http://127.0.0.1:{port}"
        if backend.ready_path is None:
            wait_port(port, child.proc, timeout_s=backend.ready_timeout_s)
        else:
            wait_http(url + backend.ready_path, child.proc, timeout_s=backend.ready_timeout_s)
        yield Served(url, port, child.pid)
