"""The backends the project did not write, installed from package registries (`make
foreign-backends`): what each serves, how its data is made, how it is started, and its
request types (a cheap lookup and costly scans, two orders of magnitude apart).

- `datasette` (PyPI): a SQLite database published read-only over HTTP. A row by primary key
  is a few ms; a LIKE scan over the text column and a GROUP BY aggregate over the whole
  table are hundreds of ms (arbitrary SQL through its `?sql=` API).
- `json-server` (npm): a JSON file served as a REST API by one Node.js thread. A record of
  a small collection (`users`) by id is a few ms; its full-text search `?q=` over the large
  one (`items`) walks every record, and sorting the matches of a common word costs more.

Data are generated from a seed (same bytes for the same settings) into the run's scratch
directory, written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .base import Backend, GatekeeperError

#: Words the text columns are made of; searches look for ones that are rare on purpose
#: (a LIKE or `q=` scan that finds few rows still reads them all).
WORDS = [f"w{i:03d}" for i in range(400)]
RARE = ["zq1", "zq2", "zq3", "zq4"]
#: Bound on generated rows (memory and disk of the scratch directory).
MAX_ROWS = 5_000_000


@dataclass(frozen=True)
class RequestType:
    """One request type: `path` is a template with `{id}` and `{word}` filled per request;
    `pattern` the gatekeeper's classification regex (matched against "METHOD /path?query")."""

    name: str
    weight: float
    path: str
    pattern: str
    #: `{id}` is drawn from 1..=ids (0: the backend's rows).
    ids: int = 0

    def sample(self, rng: random.Random, rows: int) -> str:
        return self.path.format(
            id=rng.randint(1, self.ids or rows), word=rng.choice(RARE), common=rng.choice(WORDS)
        )


@dataclass
class ForeignBackend(Backend):
    """A foreign backend: its rows, request types and the path that answers once it serves;
    `command` serves it (the port as `{port}`) after `prefix` (e.g. the pinning wrapper);
    `max_in_flight` and `estimate_basis` the gatekeeper's flags for it, if set."""

    rows: int
    types: tuple[RequestType, ...]
    name: str = "foreign"
    ready_path: str | None = None
    command: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)
    max_in_flight: int | None = None
    estimate_basis: str | None = None
    ready_timeout_s = 60.0

    def argv(self, port: int) -> list[str]:
        return self.prefix + [a.replace("{port}", str(port)) for a in self.command]

    def gate_flags(self) -> dict[str, Any]:
        return {
            "classify": [(t.name, t.pattern) for t in self.types],
            "max_in_flight": self.max_in_flight,
            "estimate_basis": self.estimate_basis,
        }

    def calibration_mix(self, rng: random.Random | None = None) -> dict[str, Any]:
        """One sampled path per type, weighted by the type's weight."""
        rng = rng or random.Random(1)
        return {"paths": [(t.sample(rng, self.rows), t.weight) for t in self.types]}

    def type_of(self, path: str) -> str:
        line = f"GET {path}"
        return next((t.name for t in self.types if re.search(t.pattern, line)), "other")


def _text(rng: random.Random, words: int) -> str:
    out = [rng.choice(WORDS) for _ in range(words)]
    if rng.random() < 0.001:
        out[rng.randrange(words)] = rng.choice(RARE)
    return " ".join(out)


def _check_rows(rows: int) -> None:
    if not 1_000 <= rows <= MAX_ROWS:
        raise GatekeeperError(f"rows must be in 1000..={MAX_ROWS}, got {rows}")


def make_sqlite(path: Path, rows: int, seed: int) -> None:
    """Table `items(id INTEGER PRIMARY KEY, title, category, price, body)` with `rows` rows."""
    _check_rows(rows)
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.execute(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, title TEXT, category INTEGER, price REAL, body TEXT)"
        )
        batch = 10_000
        for start in range(1, rows + 1, batch):
            con.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                (
                    (i, _text(rng, 4), rng.randrange(1000), round(rng.uniform(1, 500), 2), _text(rng, 24))
                    for i in range(start, min(start + batch, rows + 1))
                ),
            )
        con.commit()
    finally:
        con.close()
    os.replace(tmp, path)


#: Records of json-server's small collection (the cheap lookups).
USERS = 1000


def make_json(path: Path, rows: int, seed: int) -> None:
    """`{"items": [{id, title, category, price, body}, ...], "users": [{id, name}, ...]}`:
    `rows` items and USERS users."""
    _check_rows(rows)
    rng = random.Random(seed)
    items = [
        {
            "id": i,
            "title": _text(rng, 4),
            "category": rng.randrange(1000),
            "price": round(rng.uniform(1, 500), 2),
            "body": _text(rng, 24),
        }
        for i in range(1, rows + 1)
    ]
    users = [{"id": i, "name": f"user{i}"} for i in range(1, USERS + 1)]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"items": items, "users": users}))
    os.replace(tmp, path)


def _sql(query: str) -> str:
    return "/foreign.json?sql=" + quote(query, safe="")


def datasette(rows: int) -> ForeignBackend:
    return ForeignBackend(
        name="datasette",
        rows=rows,
        ready_path="/foreign.json",
        types=(
            RequestType("lookup", 90, "/foreign/items/{id}.json", r"^GET /foreign/items/\d+\.json"),
            RequestType(
                "like_scan",
                5,
                _sql("select count(*) from items where body like '%{word}%' or title like '%{word}%'"),
                r"^GET /foreign\.json\?sql=select%20count",
            ),
            RequestType(
                "group_by",
                5,
                _sql("select category, count(*), avg(price), max(length(body)) from items group by category"),
                r"^GET /foreign\.json\?sql=select%20category",
            ),
        ),
    )


def json_server(rows: int) -> ForeignBackend:
    return ForeignBackend(
        name="json-server",
        rows=rows,
        ready_path="/users/1",
        types=(
            RequestType("lookup", 90, "/users/{id}", r"^GET /users/\d+", ids=USERS),
            RequestType("full_text", 5, "/items?q={word}&_limit=5", r"^GET /items\?q=zq"),
            RequestType("sorted_search", 5, "/items?q={common}&_sort=price&_limit=5", r"^GET /items\?q=w"),
        ),
    )


def prepare(name: str, rows: int, seed: int, work: Path, tools: Path, **flags: Any) -> ForeignBackend:
    """Make the backend's data in `work` and return it, serving that data. `tools`: where
    `make foreign-backends` installed the packages; `flags`: `prefix`, `max_in_flight`,
    `estimate_basis` of `ForeignBackend`."""
    if name == "datasette":
        exe = tools / "datasette" / "bin" / "datasette"
        if not exe.exists():
            raise GatekeeperError(f"{exe} missing: run `make foreign-backends`")
        db = work / "foreign.db"
        make_sqlite(db, rows, seed)
        argv = [str(exe), "serve", "-i", str(db), "--host", "127.0.0.1", "--port", "{port}"]
        argv += ["--setting", "sql_time_limit_ms", "120000", "--setting", "default_cache_ttl", "0"]
        return ForeignBackend(**{**vars(datasette(rows)), "command": argv, **flags})
    if name == "json-server":
        exe = tools / "node" / "node_modules" / ".bin" / "json-server"
        if not exe.exists():
            raise GatekeeperError(f"{exe} missing: run `make foreign-backends`")
        db = work / "db.json"
        make_json(db, rows, seed)
        # Read-only (nothing written back to the file), no gzip (the cost is the search).
        argv = [str(exe), "--host", "127.0.0.1", "--port", "{port}", "--ro", "--no-gzip", "--quiet", str(db)]
        return ForeignBackend(**{**vars(json_server(rows)), "command": argv, **flags})
    raise GatekeeperError(f"unknown backend {name!r}: expected datasette or json-server")
