"""Every module of the lab imports: a module only a long bench or experiment runs (and no
unit test touches) must not break silently when a module it uses is renamed or removed."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import shortfirst_lab

# `__main__` modules are entry points: importing one runs it.
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(shortfirst_lab.__path__, "shortfirst_lab.")
    if not m.name.endswith(".__main__")
)


def test_the_walk_finds_the_lab():
    assert (
        "shortfirst_lab.runners.netembench" in MODULES
        and "shortfirst_lab.runners.gatekeeper.tpcw.cli" in MODULES
    )


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    importlib.import_module(name)
