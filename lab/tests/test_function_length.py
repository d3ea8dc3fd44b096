"""A function does one job: no Python function we ship passes 80 lines (the Rust side is held
to the same limit by clippy's too_many_lines, clippy.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The Python sources `make lint` checks (Makefile's PY_SOURCES).
SOURCES = (
    "lab/shortfirst_lab",
    "lab/tests",
    "bench",
    "crates/load/bench",
    "scripts",
)
MAX_LINES = 80


def long_functions(root: Path, dirs: tuple[str, ...], max_lines: int) -> list[str]:
    """`path:line name (n lines)` for every function or method longer than `max_lines`,
    decorators excluded, its docstring and comments included."""
    out = []
    for d in dirs:
        for path in sorted((root / d).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > max_lines:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_passes_the_limit():
    assert long_functions(ROOT, SOURCES, MAX_LINES) == []


def test_the_check_finds_a_long_function(tmp_path):
    (tmp_path / "m").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m" / "a.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path, ("m",), MAX_LINES) == [f"m/a.py:5 long ({MAX_LINES + 1} lines)"]
