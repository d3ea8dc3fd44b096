"""The lab's packages and their one-way import direction, read from the source's imports:
the kit imports nothing of ours; the spec imports the kit; the testbed the kit; the command
lines of our binaries (`commands`) the kit; theory the kit, `commands` and the spec (the
binary's vocabulary: `serve`'s default cutoffs); analysis never the
testbed or the runners; only the runners import the testbed. The command
line (`__main__`) dispatches every verb and may import any package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "shortfirst_lab"

#: Each package (or top-level module) and what of ours it may import besides itself.
ALLOWED: dict[str, set[str]] = {
    "kit": set(),
    "depcheck": set(),
    "commands": {"kit"},
    "spec": {"kit"},
    "testbed": {"kit"},
    "theory": {"kit", "commands", "spec"},
    "analysis": {"kit", "commands", "spec", "theory"},
    "runners": {"kit", "commands", "spec", "testbed", "analysis"},
    "__main__": {"kit", "commands", "spec", "testbed", "analysis", "runners", "theory"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(rel: Path, source: str) -> set[str]:
    """The layers of ours the module at `rel` (in the package) imports: relative or absolute,
    at any depth, lazily inside functions too."""
    pkg = list(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[: len(pkg) - (node.level - 1)]
            parts = base + (node.module.split(".") if node.module else [])
            names = [parts] if parts else [[a.name] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shortfirst_lab"):
            parts = node.module.split(".")[1:]
            names = [parts] if parts else [[a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1:] for a in node.names if a.name.startswith("shortfirst_lab.")]
        else:
            continue
        found.update(n[0] for n in names if n)
    return found


MODULES = sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


def test_every_module_is_in_a_layer():
    assert {_layer(p) for p in MODULES} == set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PKG).as_posix())
def test_imports_go_one_way(path):
    layer = _layer(path)
    wrong = _imports(path.relative_to(PKG), path.read_text()) - ALLOWED[layer] - {layer}
    assert not wrong, f"{path.relative_to(PKG)} ({layer}) imports {sorted(wrong)}"


def test_the_checker_sees_a_wrong_import():
    """Relative imports are resolved from the module's place: analysis reaching into the
    testbed, or the kit into the spec, is caught."""
    src = "from ..testbed import bed\nfrom ..kit import REPO\nfrom . import figures\n"
    assert _imports(Path("analysis/x.py"), src) == {"testbed", "kit", "analysis"}
    assert _imports(Path("kit.py"), "def f():\n    from .spec import reader\n") == {"spec"}
    assert _imports(Path("runners/tpcw/x.py"), "from ...testbed.cpus import detect\n") == {"testbed"}
    assert _imports(Path("x.py"), "import shortfirst_lab.runners.static\n") == {"runners"}
