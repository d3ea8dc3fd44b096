"""Refuse Rust dependencies that no code uses.

For every workspace member, each name under [dependencies] must appear as a
path (`name::`, `use name`, `extern crate name`) in the crate's library or
binary sources (src/, build.rs excluded), each [dev-dependencies] name in any
of its sources (src/, tests/, benches/, examples/), each [build-dependencies]
name in build.rs. Every [workspace.dependencies] entry must be taken by some
member. A dependency used only through its features or a macro name can be
listed in the crate's `[package.metadata.unused-deps] ignored = [...]`.

Usage: python3 scripts/unused_deps.py [WORKSPACE_ROOT]; exit status 1 and one
line per unused dependency (crate, table, name) when there are any.
Stdlib only, so it runs on a fresh clone before anything is installed.
"""

from __future__ import annotations

import glob
import re
import sys
import tomllib
from pathlib import Path

# Sources read per crate: a limit on what one check reads.
MAX_SOURCE_BYTES = 64 * 1024 * 1024

DEP_TABLES = ("dependencies", "dev-dependencies", "build-dependencies")


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SystemExit(f"{path}: not valid TOML: {e}") from e


def members(root: Path) -> list[Path]:
    """The crate directories of the workspace at `root` (globs expanded)."""
    ws = _read_toml(root / "Cargo.toml").get("workspace", {})
    dirs: list[Path] = []
    for pattern in ws.get("members", []):
        for d in sorted(glob.glob(glob.escape(str(root)) + "/" + pattern)):
            if (Path(d) / "Cargo.toml").is_file():
                dirs.append(Path(d))
    excluded = {(root / e).resolve() for e in ws.get("exclude", [])}
    return [d for d in dirs if d.resolve() not in excluded]


def _sources(crate: Path, parts: tuple[str, ...]) -> str:
    """The text of every .rs file under the given parts of `crate`."""
    texts: list[str] = []
    total = 0
    for part in parts:
        p = crate / part
        files = [p] if p.is_file() else sorted(p.rglob("*.rs")) if p.is_dir() else []
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            total += len(text)
            if total > MAX_SOURCE_BYTES:
                raise SystemExit(
                    f"{crate}: more than {MAX_SOURCE_BYTES} bytes of Rust sources; raise the limit"
                )
            texts.append(_code(text))
    return "\n".join(texts)


# Comments, string and character literals: a name inside one is no use.
_NOT_CODE = re.compile(r"//[^\n]*|/\*.*?\*/|\br(#*)\".*?\"\1|b?\"(?:\\.|[^\"\\])*\"|b?'(?:\\.|[^'\\])'", re.S)


def _code(text: str) -> str:
    return _NOT_CODE.sub(" ", text)


def _used(name: str, text: str) -> bool:
    ident = re.escape(name.replace("-", "_"))
    return (
        re.search(rf"(?<![\w:]){ident}\s*::|\buse\s+{ident}\b|\bextern\s+crate\s+{ident}\b", text) is not None
    )


def unused_in_crate(crate: Path, root: Path | None = None) -> list[str]:
    """`crate/Cargo.toml: [table] name` for each dependency its code does not use."""
    manifest = _read_toml(crate / "Cargo.toml")
    package = manifest.get("package", {})
    ignored = set(package.get("metadata", {}).get("unused-deps", {}).get("ignored", []))
    build_rs = package.get("build", "build.rs") if package.get("build", True) else None
    # A [[bin]] or [[example]] may live outside src/ (e.g. the fuzz targets).
    target_paths = tuple(
        t["path"] for kind in ("bin", "example") for t in manifest.get(kind, []) if "path" in t
    )
    scopes = {
        "dependencies": ("src", *target_paths),
        "dev-dependencies": ("src", "tests", "benches", "examples"),
        "build-dependencies": (build_rs,) if build_rs else (),
    }
    found: list[str] = []
    for table in DEP_TABLES:
        deps = manifest.get(table, {})
        if not deps:
            continue
        text = _sources(crate, scopes[table])
        for name in sorted(deps):
            if name not in ignored and not _used(name, text):
                manifest_path = (crate / "Cargo.toml").relative_to(root) if root else crate / "Cargo.toml"
                found.append(f"{manifest_path}: [{table}] {name}")
    return found


def unused_in_workspace(root: Path) -> list[str]:
    """Unused dependencies of every member, then [workspace.dependencies]
    entries that no member takes."""
    found: list[str] = []
    taken: set[str] = set()
    for crate in members(root):
        found += unused_in_crate(crate, root)
        manifest = _read_toml(crate / "Cargo.toml")
        for table in DEP_TABLES:
            for name, spec in manifest.get(table, {}).items():
                if isinstance(spec, dict) and spec.get("workspace"):
                    taken.add(name)
    declared = _read_toml(root / "Cargo.toml").get("workspace", {}).get("dependencies", {})
    for name in sorted(declared):
        if name not in taken:
            found.append(f"Cargo.toml: [workspace.dependencies] {name} (no member takes it)")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    if not (root / "Cargo.toml").is_file():
        print(f"unused_deps: no Cargo.toml in {root}", file=sys.stderr)
        return 2
    found = unused_in_workspace(root)
    for line in found:
        print(f"unused dependency: {line}", file=sys.stderr)
    if found:
        print(
            f"unused_deps: {len(found)} unused; remove them, or list one used only through features "
            "under [package.metadata.unused-deps] ignored",
            file=sys.stderr,
        )
        return 1
    print(f"unused_deps: every dependency of {len(members(root))} crates is used")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
