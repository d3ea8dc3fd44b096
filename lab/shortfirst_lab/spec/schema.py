"""What every experiment schema shares: the error that names the file and the key, reading a
TOML file once, `SECTION.KEY=VALUE` overrides, and typed fields checked table by table.

Strict everywhere: an unknown section or key, a wrong type or an out-of-range value is a
`SpecError` naming the file, the dotted key and what was expected, before anything runs,
because a misspelt key that silently falls back to a default wastes an hour of machine time.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import LabError


class SpecError(LabError, ValueError):
    """A bad experiment file: names the file, the dotted key and what was expected."""

    def __init__(self, path: str | Path, key: str, expected: str, got: Any = None):
        self.path = str(path)
        self.key = key
        self.expected = expected
        self.got = got
        where = f"{self.path}: {key}" if key else self.path
        msg = f"{where}: expected {expected}"
        if got is not None:
            msg += f", got {got!r}"
        super().__init__(msg)


def read_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """The parsed document and its text; an unreadable file or bad TOML is a SpecError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(path, "", f"a readable file ({e.strerror})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        raise SpecError(path, "", f"valid TOML ({e})") from None


def apply_override(doc: dict[str, Any], override: str, path: str | Path = "<override>") -> None:
    """Set `SECTION.KEY=VALUE` (VALUE parsed as TOML; a bare word is a string) in `doc`, in place."""
    key, sep, raw = override.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) != 2 or not all(parts):
        raise SpecError(path, key.strip(), "an override SECTION.KEY=VALUE", override)
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word is taken as a string: model=open
    section = doc.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise SpecError(path, parts[0], "a table", section)
    section[parts[1]] = value


@dataclass(frozen=True)
class Field:
    """One key of a schema: its kind (`int`, `number`, `str`, `bool`, `text` (a word or a
    number), `ints`, `numbers`, `strs`, `table`), bounds and choices; `required` keys must be
    present after the overrides; a list may be empty only where `empty_ok`."""

    kind: str
    required: bool = False
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    what: str = ""
    empty_ok: bool = False


def positive(kind: str, required: bool = False) -> Field:
    """A number (or int) > 0."""
    return Field(kind, required, lo=0, lo_open=True)


_KIND_NAMES = {
    "int": "an integer",
    "number": "a number",
    "str": "a string",
    "bool": "true or false",
    "text": "a word or a number",
}


def check_field(path: Path, key: str, f: Field, v: Any) -> None:
    """Type, bounds and choices of one value; raises SpecError naming `key`."""
    if f.kind == "table":
        if not isinstance(v, dict):
            raise SpecError(path, key, "a table", v)
        return
    if f.kind in ("ints", "numbers", "strs"):
        if not isinstance(v, list) or not (v or f.empty_ok):
            raise SpecError(path, key, "a list" if f.empty_ok else "a non-empty list", v)
        item = Field(f.kind[:-1], lo=f.lo, lo_open=f.lo_open, hi=f.hi, hi_open=f.hi_open, choices=f.choices)
        for i, x in enumerate(v):
            check_field(path, f"{key}[{i}]", item, x)
        return
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "number": isinstance(v, int | float) and not isinstance(v, bool),
        "str": isinstance(v, str),
        "bool": isinstance(v, bool),
        "text": isinstance(v, str | int | float) and not isinstance(v, bool),
    }[f.kind]
    if not ok:
        raise SpecError(path, key, _KIND_NAMES[f.kind] + (f" ({f.what})" if f.what else ""), v)
    if f.choices and v not in f.choices:
        raise SpecError(path, key, f"one of {list(f.choices)}", v)
    if isinstance(v, str | bool) or f.kind == "text":
        return
    if not math.isfinite(v):
        raise SpecError(path, key, "a finite number", v)
    if f.lo is not None and (v < f.lo or (f.lo_open and v == f.lo)):
        raise SpecError(path, key, f"a value {'>' if f.lo_open else '>='} {f.lo:g}", v)
    if f.hi is not None and (v > f.hi or (f.hi_open and v == f.hi)):
        raise SpecError(path, key, f"a value {'<' if f.hi_open else '<='} {f.hi:g}", v)


def check_table(path: Path, name: str, table: Any, fields: dict[str, Field]) -> None:
    """One table against its fields: unknown keys, types and bounds, required keys."""
    if not isinstance(table, dict):
        raise SpecError(path, name, "a table", table)
    for key, value in table.items():
        if key not in fields:
            raise SpecError(path, f"{name}.{key}", f"one of the known keys {sorted(fields)} (unknown key)")
        check_field(path, f"{name}.{key}", fields[key], value)
    for key, f in fields.items():
        if f.required and key not in table:
            raise SpecError(path, f"{name}.{key}", "this key (it is required)")


def check_sections(
    path: Path, doc: dict[str, Any], known: tuple[str, ...], required: tuple[str, ...]
) -> None:
    """Unknown and missing sections of a document."""
    for name in doc:
        if name not in known:
            raise SpecError(path, name, f"one of the sections {list(known)} (unknown section)")
    for name in required:
        if name not in doc:
            raise SpecError(path, name, "this section (it is required)")


#: The gatekeeper experiments' backends, each with its own table in the file: what the
#: top-level `backend` key may name.
GATEKEEPER_BACKENDS = ("synthetic", "bookstore", "datasette", "json-server")


def check_backend(path: Path, doc: dict[str, Any], allowed: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """A gatekeeper experiment's top-level `backend = "NAME"` (one of `allowed`, each of
    GATEKEEPER_BACKENDS) and the rest of the document: its sections."""
    name = doc.get("backend")
    if name not in allowed:
        raise SpecError(path, "backend", f"one of {list(allowed)}", name)
    return name, {k: v for k, v in doc.items() if k != "backend"}
