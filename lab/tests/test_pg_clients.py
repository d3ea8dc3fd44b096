"""PostgreSQL drivers we did not write, through the PostgreSQL gatekeeper: psycopg 3 (libpq)
and asyncpg (its own protocol code), as an application would use them; and in other
languages, pgx (Go), pgjdbc (Java) and node-postgres (JavaScript), each a program in
`lab/drivers/` built here from the versions it pins (go.sum, pom.xml, package-lock.json, from
the registries) and skipped, saying so, where its toolchain is missing. The gatekeeper runs
with TLS, sjf and a gate that queues (two transactions in flight); the server asks for
SCRAM passwords. Each driver's common paths: authentication relayed, TLS with the
certificate verified, pipelines and batches, transactions with savepoints and errors, COPY
in and out, server-side cursors, LISTEN/NOTIFY, a cancel while a statement runs (libpq's and
asyncpg's own CancelRequest), and many connections queued by the gate at once.

Needs PostgreSQL (Debian's, `make apt`) and the binary (`$SHORTFIRST_BIN`, else the release
build); skipped with a message
otherwise. About 10 s, and a minute more the first time the other drivers are fetched.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import psycopg
import pytest
from conftest import REPO

from shortfirst_lab import commands
from shortfirst_lab.kit import Child, free_port, self_signed_cert, shortfirst_binary, wait_port
from shortfirst_lab.runners.gatekeeper.backends.postgres import postgres

BIN = shortfirst_binary()
PASSWORD = "gatekeeper-test"
#: The programs that drive pgx, pgjdbc and node-postgres.
DRIVERS = REPO / "lab" / "drivers"
#: Seconds a driver's fetch and build may take (the first run downloads it), and its run.
BUILD_TIMEOUT_S, RUN_TIMEOUT_S = 600, 120

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    if not BIN.exists():
        return f"needs the release build ({BIN}: make build)"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and not shutil.which("initdb"):
        return "needs PostgreSQL (Debian package postgresql: make apt)"
    return None


@pytest.fixture(scope="module")
def dsn(tmp_path_factory):
    """A private PostgreSQL asking for SCRAM, and the gatekeeper in front of it with TLS:
    the URL of the gatekeeper (without sslmode) and the certificate to trust."""
    if (why := _missing()) is not None:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("pgclients")
    gk_port = free_port()
    with postgres(max_connections=100) as pg:
        with psycopg.connect(pg.url, autocommit=True) as c:
            c.execute(f"ALTER ROLE bookstore PASSWORD '{PASSWORD}'")
            hba = Path(c.execute("SHOW hba_file").fetchone()[0])
            hba.write_text(re.sub(r"^(host\s.*\s)trust$", r"\1scram-sha-256", hba.read_text(), flags=re.M))
            c.execute("SELECT pg_reload_conf()")
        cert, key = self_signed_cert(d / "tls")
        argv = commands.gatekeeper(
            BIN,
            listen=f"127.0.0.1:{gk_port}",
            upstream=f"postgres://127.0.0.1:{urlsplit(pg.url).port}",
            policy="sjf",
            capacity="50ms",
            max_in_flight=2,
            extra=["--tls-cert", str(cert), "--tls-key", str(key)],
        )
        with Child(argv, d / "gatekeeper.log") as gk:
            wait_port(gk_port, gk.proc)
            yield f"postgresql://bookstore:{PASSWORD}@127.0.0.1:{gk_port}/bookstore", cert


def test_the_server_asks_for_a_password(dsn):
    url, _ = dsn
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(url.replace(f":{PASSWORD}", "") + "?sslmode=disable", connect_timeout=10)


def test_psycopg(dsn):
    url, cert = dsn
    with psycopg.connect(f"{url}?sslmode=verify-full&sslrootcert={cert}") as c:
        assert c.pgconn.ssl_in_use
        c.execute("DROP TABLE IF EXISTS t_p; CREATE TABLE t_p (id int PRIMARY KEY, v text)")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO t_p VALUES (%s, %s)", [(i, f"v{i}") for i in range(300)])
        c.commit()
        with c.pipeline():
            cursors = [c.execute("SELECT v FROM t_p WHERE id = %s", (i,)) for i in range(50)]
        assert [x.fetchone()[0] for x in cursors] == [f"v{i}" for i in range(50)]
        c.commit()
        with c.cursor(name="server_side") as cur:
            cur.execute("SELECT id FROM t_p ORDER BY id")
            assert len(cur.fetchall()) == 300
        c.commit()
        with c.cursor() as cur, cur.copy("COPY t_p (id, v) FROM STDIN") as cp:
            for i in range(300, 600):
                cp.write_row((i, "c"))
        c.commit()
        with c.cursor() as cur, cur.copy("COPY t_p TO STDOUT") as cp:
            assert sum(1 for _ in cp.rows()) == 600
        c.commit()
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute("INSERT INTO t_p VALUES (1, 'again')")
        c.rollback()
        c.execute("SET statement_timeout = '300ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT pg_sleep(3)")
        c.rollback()
        assert c.execute("SELECT 3").fetchone()[0] == 3
    with psycopg.connect(f"{url}?sslmode=require", autocommit=True) as c:
        threading.Timer(0.5, c.cancel).start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 3
        c.execute("PREPARE p1 AS SELECT $1::int + 1")
        assert c.execute("EXECUTE p1(41)").fetchone()[0] == 42
        for i in range(10):  # prepared by psycopg after five executions
            assert c.execute("SELECT v FROM t_p WHERE id = %s", (i,)).fetchone()[0] == f"v{i}"


def test_asyncpg(dsn):
    asyncio.run(_asyncpg(*dsn))


async def _asyncpg(url: str, cert: Path) -> None:
    tls = ssl.create_default_context(cafile=str(cert))
    c = await asyncpg.connect(url, ssl=tls)
    await c.execute("DROP TABLE IF EXISTS t_a; CREATE TABLE t_a (id int PRIMARY KEY, v text, b bytea)")
    rows = [(i, f"v{i}", bytes([i % 256])) for i in range(500)]
    await c.executemany("INSERT INTO t_a VALUES ($1, $2, $3)", rows)
    statement = await c.prepare("SELECT v FROM t_a WHERE id = $1")
    assert await statement.fetchval(7) == "v7"
    async with c.transaction():
        await c.execute("UPDATE t_a SET v = 'x' WHERE id = 1")
        async with c.transaction():  # a savepoint
            await c.execute("UPDATE t_a SET v = 'y' WHERE id = 2")
    assert await c.fetchval("SELECT v FROM t_a WHERE id = 2") == "y"
    with pytest.raises(asyncpg.UniqueViolationError):
        async with c.transaction():
            await c.execute("INSERT INTO t_a VALUES (1, 'again')")
    await c.copy_records_to_table("t_a", records=[(1000 + i, "c", b"z") for i in range(1000)])
    out = io.BytesIO()
    await c.copy_from_query("SELECT * FROM t_a", output=out, format="csv")
    assert out.getvalue().count(b"\n") == 1500
    async with c.transaction():
        assert len([r async for r in c.cursor("SELECT id FROM t_a", prefetch=50)]) == 1500
    assert len(await c.fetchval("SELECT repeat('x', 5000000)")) == 5_000_000
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await c.execute("SELECT pg_sleep(5)", timeout=0.5)  # asyncpg cancels the statement
    assert time.monotonic() - started < 3 and await c.fetchval("SELECT 2") == 2
    heard = asyncio.get_running_loop().create_future()
    listener = await asyncpg.connect(url, ssl=tls)
    await listener.add_listener("chan", lambda *args: heard.done() or heard.set_result(args[3]))
    await c.execute("NOTIFY chan, 'hello'")
    assert await asyncio.wait_for(heard, 10) == "hello"
    await listener.close()
    await c.close()
    pool = await asyncpg.create_pool(url, ssl=tls, min_size=2, max_size=20)
    doubled = await asyncio.gather(*[pool.fetchval("SELECT $1::int * 2", i) for i in range(300)])
    assert doubled == [2 * i for i in range(300)]
    await pool.close()


def _driver(name: str, tool: str, tmp_path: Path) -> Path:
    """A copy of `lab/drivers/NAME` to build in, once `tool` is known to be installed."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not found: the {name} check needs it")
    work = tmp_path / name
    shutil.copytree(DRIVERS / name, work, ignore=shutil.ignore_patterns("node_modules", "target"))
    return work


def _step(argv: list[str], cwd: Path, timeout_s: float, env: dict | None = None) -> str:
    """Runs one step of a driver's check; its output on failure."""
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert r.returncode == 0, (
        f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def test_pgx(dsn, tmp_path):
    url, cert = dsn
    work = _driver("pgx", "go", tmp_path)
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    _step(["go", "build", "-o", "pgxcheck", "."], work, BUILD_TIMEOUT_S, env)
    out = _step([str(work / "pgxcheck"), f"{url}?sslmode=verify-ca&sslrootcert={cert}"], work, RUN_TIMEOUT_S)
    assert out.rstrip().endswith("ALL OK"), out


def test_pgjdbc(dsn, tmp_path):
    url, cert = dsn
    work = _driver("pgjdbc", "mvn", tmp_path)
    _step(
        ["mvn", "-q", "-B", "dependency:copy-dependencies", "-DoutputDirectory=deps"], work, BUILD_TIMEOUT_S
    )
    u = urlsplit(url)
    jdbc = f"jdbc:postgresql://{u.hostname}:{u.port}{u.path}?user={u.username}&password={u.password}"
    jdbc += f"&sslmode=verify-ca&sslrootcert={cert}"
    out = _step(["java", "-cp", "deps/*", "src/main/java/Check.java", jdbc], work, RUN_TIMEOUT_S)
    assert out.rstrip().endswith("ALL OK"), out


def test_node_postgres(dsn, tmp_path):
    url, cert = dsn
    work = _driver("node-postgres", "npm", tmp_path)
    _step(["npm", "ci", "--no-audit", "--no-fund", "--silent"], work, BUILD_TIMEOUT_S)
    out = _step(["node", "check.js", f"{url}?sslmode=verify-full&sslrootcert={cert}"], work, RUN_TIMEOUT_S)
    assert out.rstrip().endswith("ALL OK"), out
