"""Shared helpers for the simulator tests."""

import pytest

from shortfirst_lab.simfigs import SimError, find_binary


def require_binary():
    """The `shortfirst` release binary, or a clear test failure when it is not built."""
    try:
        return find_binary()
    except SimError as e:
        pytest.fail(str(e))
