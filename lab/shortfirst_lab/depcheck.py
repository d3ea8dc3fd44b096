"""Keeps the lab's Python dependencies honest (`make lint` runs it).

Three checks, each an error naming the package:

- a distribution declared in pyproject.toml (dependencies and optional dependencies) that no
  Python file imports, unless it is a tool run as a command (``[tool.shortfirst.depcheck]
  commands``, e.g. ruff);
- a third-party module imported somewhere that no declared distribution provides;
- requirements.lock disagreeing with pyproject.toml about the direct dependencies (the lines
  ``# via shortfirst-lab (pyproject.toml)``): a package dropped from one and left in the other.

Standard library only. Import names come from the installed distributions' metadata
(``importlib.metadata.packages_distributions``), so run it with the venv's python.

    python -m shortfirst_lab depcheck --pyproject pyproject.toml --lock requirements.lock DIR...
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

#: Directories never scanned (virtual environments, caches, build output).
SKIP_DIRS = {".venv", "venv", "__pycache__", ".git", "build", "dist", "target", "node_modules"}


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """``numpy>=1.26`` → ``numpy``; ``pkg[extra]; python_version>'3'`` → ``pkg``."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not m:
        raise ValueError(f"not a requirement: {spec!r}")
    return normalize(m.group(1))


def declared(pyproject: dict) -> tuple[set[str], set[str], str]:
    """(declared distributions, those run as commands, the project's own name)."""
    project = pyproject.get("project", {})
    names = {requirement_name(s) for s in project.get("dependencies", [])}
    for specs in project.get("optional-dependencies", {}).values():
        names |= {requirement_name(s) for s in specs}
    cfg = pyproject.get("tool", {}).get("shortfirst", {}).get("depcheck", {})
    commands = {normalize(c) for c in cfg.get("commands", [])}
    return names, commands, project.get("name", "")


def imports_of(source: str) -> set[str]:
    """Top-level names of the absolute imports in a Python source."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def python_files(roots: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
            continue
        for p in sorted(root.rglob("*.py")):
            if not SKIP_DIRS.intersection(p.relative_to(root).parts):
                files.append(p)
    return files


def local_modules(files: Iterable[Path]) -> set[str]:
    """Modules the scanned tree provides itself: every file's stem and every package directory."""
    names: set[str] = set()
    for f in files:
        names.add(f.stem)
        names |= {part for part in f.parent.parts if (f.parent / "__init__.py").exists()}
    return names


def lock_direct(lock_text: str, project: str) -> set[str]:
    """The packages a uv/pip-compile lock says the project itself asks for."""
    out: set[str] = set()
    current = None
    via_project = re.compile(rf"#\s+(via\s+)?{re.escape(project)}\b")
    for line in lock_text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if m:
            current = normalize(m.group(1))
        elif current and via_project.search(line):
            out.add(current)
    return out


def check(
    pyproject: dict,
    imported: set[str],
    local: set[str],
    providers: Mapping[str, list[str]],
    lock_text: str | None = None,
) -> list[str]:
    """Every problem as one line (empty: all good). ``providers`` maps an import name to the
    distributions that provide it (``packages_distributions()``)."""
    names, commands, project = declared(pyproject)
    problems: list[str] = []
    used: set[str] = set()
    for module in sorted(imported):
        if module in sys.stdlib_module_names or module in local or module == "__future__":
            continue
        dists = {normalize(d) for d in providers.get(module, [])} or {normalize(module)}
        hit = dists & names
        if hit:
            used |= hit
        else:
            problems.append(f"import {module}: no declared dependency provides it (add {sorted(dists)[0]})")
    for name in sorted(names - used - commands):
        problems.append(f"dependency {name}: declared in pyproject.toml but imported nowhere (remove it)")
    if lock_text is not None:
        locked = lock_direct(lock_text, project)
        for name in sorted(names - locked):
            problems.append(f"dependency {name}: declared in pyproject.toml but not in the lock (re-lock)")
        for name in sorted(locked - names):
            problems.append(
                f"lock pins {name} for {project}, which pyproject.toml does not declare (re-lock)"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shortfirst_lab depcheck", description=__doc__.split("\n")[0])
    ap.add_argument("--pyproject", type=Path, required=True)
    ap.add_argument("--lock", type=Path, help="requirements.lock to compare with pyproject.toml")
    ap.add_argument("roots", type=Path, nargs="+", help="directories (or files) of Python sources")
    a = ap.parse_args(argv)
    pyproject = tomllib.loads(a.pyproject.read_text())
    files = python_files(a.roots)
    imported: set[str] = set()
    for f in files:
        try:
            imported |= imports_of(f.read_text(encoding="utf-8"))
        except SyntaxError as e:
            print(f"depcheck: {f}: {e}", file=sys.stderr)
            return 2
    lock = a.lock.read_text() if a.lock else None
    problems = check(pyproject, imported, local_modules(files), packages_distributions(), lock)
    for p in problems:
        print(f"depcheck: {p}", file=sys.stderr)
    if not problems:
        print(f"depcheck: {len(files)} files, dependencies as declared")
    return 1 if problems else 0
