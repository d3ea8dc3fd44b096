"""Debian's PgBouncer in transaction pooling in front of the private PostgreSQL
(`postgres.postgres`): its configuration written to a directory of its own, the process a
`kit.Child` (as PostgreSQL's system user when the lab runs as root: PgBouncer refuses root),
ready once it accepts connections.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ....kit import Child, free_port, wait_port
from .base import GatekeeperError

PGBOUNCER = Path("/usr/sbin/pgbouncer")


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: its URL (same user and database as the server's) and process id."""

    url: str
    pid: int


def config(server_url: str, port: int, pool_size: int, max_clients: int, users: Path) -> str:
    """pgbouncer.ini: one database, the server's, pooled by transaction over `pool_size`
    server connections; trust authentication of the server's user (`users`)."""
    u = urlsplit(server_url)
    db = u.path.lstrip("/")
    return (
        f"[databases]\n{db} = host={u.hostname} port={u.port} dbname={db}\n\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = {max_clients}\n"
        # pgbench and libpq send these at startup; PgBouncer refuses unknown parameters.
        "ignore_startup_parameters = extra_float_digits,options\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )


@contextmanager
def pgbouncer(
    server_url: str, pool_size: int, max_clients: int, log: Path, prefix: list[str] | None = None
) -> Iterator[Bouncer]:
    """PgBouncer (transaction mode, `pool_size` server connections, at most `max_clients`
    clients) in front of `server_url`, stopped when the block ends; started by `prefix` (e.g.
    `cpus run --`, which execs it: the process id stays the one started)."""
    if not PGBOUNCER.exists():
        raise GatekeeperError(f"{PGBOUNCER} missing: `make apt` installs Debian's pgbouncer")
    d = Path(tempfile.mkdtemp(prefix="lab-pgbouncer-", dir="/tmp"))
    try:
        d.chmod(0o755)
        port = free_port()
        user = urlsplit(server_url).username or "postgres"
        users = d / "users.txt"
        users.write_text(f'"{user}" ""\n')
        ini = d / "pgbouncer.ini"
        ini.write_text(config(server_url, port, pool_size, max_clients, users))
        argv = [*(prefix or []), str(PGBOUNCER), *(["-u", "postgres"] if os.geteuid() == 0 else []), str(ini)]
        with Child(argv, log) as child:
            wait_port(port, child.proc)
            yield Bouncer(f"postgres://{user}@127.0.0.1:{port}{urlsplit(server_url).path}", child.pid)
    finally:
        shutil.rmtree(d, ignore_errors=True)
