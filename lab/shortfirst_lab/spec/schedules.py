"""Load schedules as the lab sees them: checked, named and measured before a run starts.

`shortfirst load --load-schedule SPEC` is the authority on a schedule (crates/load
schedule.rs); the lab reads the same forms so that an experiment file with a bad schedule
is refused at validation, not an hour into a matrix, and so that it knows, per schedule:

- its **label**, part of a run directory's name (`w1`, `const1.4`, `25sx0.2_25sx1.2`);
- its **mean multiplier** over a period, which sets how much trace a run consumes;
- its **kind**: `preset` (the overload paper's W1-W10), `const` (persistent load) or `phases`.

Forms (as `shortfirst load --help` gives them): `DURATION@MULT[,DURATION@MULT...]`,
`const@MULT`, `file:PATH` (one `DURATION MULTIPLIER` or `DURATION@MULT` per line, `#`
comments) and `w1` ... `w10`. Limits as the generator's: at most 10,000 phases, each at
least 1 ms, a multiplier in (0, 1e6], a period of at most 100 days, a file of at most 1 MiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit import LabError

MAX_PHASES = 10_000
MIN_PHASE_S = 0.001
MAX_MULTIPLIER = 1e6
MAX_PERIOD_S = 100 * 86_400.0
MAX_FILE_BYTES = 1 << 20
#: Longest label kept in a run directory's name.
MAX_LABEL = 48

#: Schroeder & Harchol-Balter 2006, Table 1: (kind, low s, low ρ, high s, high ρ).
PRESETS: dict[str, tuple[str, float, float, float, float]] = {
    "w1": ("alternating", 25, 0.2, 25, 1.2),
    "w2": ("alternating", 10, 0.2, 10, 1.2),
    "w3": ("alternating", 50, 0.2, 50, 1.6),
    "w4": ("alternating", 25, 0.4, 25, 1.4),
    "w5": ("alternating", 10, 0.4, 10, 1.4),
    "w6": ("alternating", 40, 0.1, 40, 1.7),
    "w7": ("intermittent", 63, 0.4, 6, 5.0),
    "w8": ("intermittent", 63, 0.45, 10, 3.0),
    "w9": ("intermittent", 20, 0.735, 3, 2.0),
    "w10": ("intermittent", 13.3, 0.735, 2, 2.0),
}

_UNITS_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")


class ScheduleError(LabError, ValueError):
    """A schedule spec the generator would refuse; the message names the phase or file line."""


@dataclass(frozen=True)
class Schedule:
    spec: str
    kind: str  # preset | const | phases | file
    phases: tuple[tuple[float, float], ...]  # (duration_s, multiplier); const: ((inf, m),)

    @property
    def label(self) -> str:
        return schedule_label(self.spec)

    @property
    def mean_multiplier(self) -> float:
        """Time-weighted mean multiplier over one period."""
        if self.kind == "const":
            return self.phases[0][1]
        total = sum(d for d, _ in self.phases)
        return sum(d * m for d, m in self.phases) / total

    @property
    def period_s(self) -> float:
        return sum(d for d, _ in self.phases)

    @property
    def peak_multiplier(self) -> float:
        return max(m for _, m in self.phases)


def parse_duration_s(text: str) -> float:
    """`25s`, `500ms`, `1m30s`, or a plain number of seconds."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS_S[m.group(2)]
        pos = m.end()
    if pos != len(t) or not t:
        raise ScheduleError(f"{text!r}: expected a duration such as 25s, 500ms or 1m30s")
    return total


def _multiplier(text: str) -> float:
    try:
        m = float(text.strip())
    except ValueError:
        raise ScheduleError(f"{text!r}: expected a multiplier (a number)") from None
    if not 0 < m <= MAX_MULTIPLIER:
        raise ScheduleError(f"multiplier {text.strip()}: expected a number in (0, {MAX_MULTIPLIER:g}]")
    return m


def _phase(text: str, where: str) -> tuple[float, float]:
    d_text, sep, m_text = text.partition("@")
    if not sep:
        raise ScheduleError(f"{where}: {text!r}: expected DURATION@MULTIPLIER, e.g. 25s@1.2")
    try:
        d = parse_duration_s(d_text)
        if not d >= MIN_PHASE_S:
            raise ScheduleError(f"duration {d_text.strip()}: expected at least 1 ms")
        return d, _multiplier(m_text)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {e}") from None


def _check_period(phases: list[tuple[float, float]], where: str) -> None:
    if not phases:
        raise ScheduleError(f"{where}: no phases")
    if len(phases) > MAX_PHASES:
        raise ScheduleError(f"{where}: {len(phases)} phases, at most {MAX_PHASES}")
    if sum(d for d, _ in phases) > MAX_PERIOD_S:
        raise ScheduleError(f"{where}: a period longer than 100 days")


def parse_file(path: Path) -> list[tuple[float, float]]:
    """The phases of a schedule file (`file:PATH`)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ScheduleError(f"{path}: larger than 1 MiB")
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScheduleError(f"{path}: cannot read ({e.strerror})") from None
    phases = []
    for no, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        words = body.split()
        if len(words) == 2:
            body = f"{words[0]}@{words[1]}"
        phases.append(_phase(body, f"{path}:{no}"))
    _check_period(phases, str(path))
    return phases


def parse(spec: str, read_files: bool = True) -> Schedule:
    """A schedule spec → Schedule. `file:` specs are read only with `read_files` (otherwise
    the file's phases are left empty: an experiment is validated where the file may not be)."""
    s = spec.strip()
    low = s.lower()
    if low in PRESETS:
        _, d_lo, m_lo, d_hi, m_hi = PRESETS[low]
        return Schedule(low, "preset", ((d_lo, m_lo), (d_hi, m_hi)))
    if low.startswith("const@"):
        return Schedule(s, "const", ((float("inf"), _multiplier(s[6:])),))
    if low.startswith("file:"):
        if not s[5:].strip():
            raise ScheduleError(f"{spec!r}: expected file:PATH")
        phases = tuple(parse_file(Path(s[5:].strip()))) if read_files else ()
        return Schedule(s, "file", phases)
    parts = s.split(",")
    phases = [_phase(p, f"phase {i + 1}") for i, p in enumerate(parts)]
    _check_period(phases, repr(spec))
    return Schedule(s, "phases", tuple(phases))


def mean_multiplier(spec: str) -> float:
    """The mean multiplier of a schedule over a period (1 without one); reads a `file:` schedule."""
    return parse(spec).mean_multiplier if spec else 1.0


def schedule_label(spec: str) -> str:
    """A file-name-safe name of a schedule: `w1`, `const1.4`, `25sx0.2_25sx1.2`, `file_NAME`."""
    s = spec.strip()
    low = s.lower()
    if low in PRESETS:
        return low
    if low.startswith("const@"):
        return "const" + s[6:].strip()
    if low.startswith("file:"):
        s = "file-" + Path(s[5:].strip()).stem
    label = re.sub(r"[^A-Za-z0-9.]+", "_", s.replace("@", "x")).strip("_.")
    return label[:MAX_LABEL] or "schedule"


def workload_name(spec: str) -> str | None:
    """`W1` ... `W10` for the overload paper's presets, else None."""
    low = spec.strip().lower()
    return low.upper() if low in PRESETS else None


def constant_multiplier(spec: str) -> float | None:
    """The multiplier of a `const@M` spec, else None."""
    s = spec.strip()
    return float(s[6:]) if s.lower().startswith("const@") else None


_EXPECTED = 'a load schedule such as "25s@0.2,25s@1.2", "const@1.4" or "w1"'


def check_spec(sec: Any, key: str, spec: str) -> None:
    """Validates one schedule of an experiment section (`expcheck._Section`): its error names
    the key. `file:` specs are checked for form only; the file is read at run time."""
    if len(spec) > 4096 or not spec.strip():
        raise sec.err(key, _EXPECTED, spec)
    try:
        parse(spec, read_files=False)
    except ScheduleError as e:
        raise sec.err(key, f"{_EXPECTED} ({e})", spec) from None


def specs_of(sec: Any, limit: int, key: str = "load_schedules") -> tuple[str, ...]:
    """A section's list of schedules, each valid, with distinct labels (they name runs)."""
    raw = sec.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise sec.err(key, "a list of load schedules (strings)", raw)
    if len(raw) > limit:
        raise sec.err(key, f"at most {limit} schedules", len(raw))
    for spec in raw:
        check_spec(sec, key, spec)
    labels = [schedule_label(x) for x in raw]
    if len(set(labels)) != len(labels):
        raise sec.err(key, f"schedules with distinct names (at most {MAX_LABEL} characters)", labels)
    return tuple(x.strip() for x in raw)
