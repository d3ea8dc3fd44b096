"""Shared helpers for the simulator tests."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from shortfirst_lab import kit
from shortfirst_lab.theory.simfigs import SimError, find_binary


def require_binary():
    """The `shortfirst` release binary, or a clear test failure when it is not built."""
    try:
        return find_binary()
    except SimError as e:
        pytest.fail(str(e))


@contextlib.contextmanager
def loopback_server(binary: Path, root: Path, log: Path) -> Iterator[str]:
    """`shortfirst serve` of ``root`` on a free loopback port (one thread, no priorities);
    yields its base URL and stops it on exit."""
    port = kit.free_port()
    serve = [str(binary), "serve", "--root", str(root), "--listen", f"127.0.0.1:{port}"]
    serve += ["--threads", "1", "--socket-priority=false"]
    with kit.Child(serve, log) as server:
        kit.wait_port(port, server.proc)
        yield f"http://127.0.0.1:{port}"
