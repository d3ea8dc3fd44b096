"""The peer web servers from Debian, configured alike to serve one docroot beside `shortfirst
serve`: nginx, h2o, Caddy and lighttpd, each with a plaintext listener and an HTTPS one (TLS
1.2/1.3 with the given certificate, HTTP/2 offered by ALPN), sendfile where the server has it,
no compression, an access log, in the foreground, with every file it writes in its own
directory, its workers as root (as `shortfirst serve` in the lab: the docroot sits under the
results directory, which need not be readable by others). `peer_argv` writes the
configuration and returns the command that runs it; each server's defaults are kept
otherwise, as an operator who installs it would find them. Debian packages: nginx, h2o,
caddy, lighttpd and lighttpd-mod-openssl (`make apt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..kit import PEER_SERVERS, LabError, write_atomic

#: Worker processes or threads of every peer: the lab's server side has one or two CPUs.
WORKERS = 2
#: The MIME types a page needs, for lighttpd (the others have their own tables).
_MIME = {
    ".html": "text/html",
    ".css": "text/css",
    ".js": "text/javascript",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".txt": "text/plain",
}


class PeerError(LabError, ValueError):
    """An unknown peer name."""


@dataclass(frozen=True)
class Listen:
    """Where a peer listens, what it serves and with which certificate."""

    addr: str
    port: int
    tls_port: int
    docroot: Path
    cert: Path
    key: Path
    server_name: str


def peer_argv(name: str, listen: Listen, workdir: Path) -> list[str]:
    """Writes `name`'s configuration under `workdir` (created) and returns its command line."""
    workdir.mkdir(parents=True, exist_ok=True)
    writers = {"nginx": _nginx, "h2o": _h2o, "caddy": _caddy, "lighttpd": _lighttpd}
    assert set(writers) == set(PEER_SERVERS)
    if name not in writers:
        raise PeerError(f"unknown peer {name!r}: one of {', '.join(PEER_SERVERS)}")
    return writers[name](listen, workdir)


def peer_env(name: str, workdir: Path) -> dict[str, str]:
    """Environment a peer needs beside the caller's: Caddy keeps its state under XDG dirs."""
    if name == "caddy":
        return {
            "XDG_DATA_HOME": str(workdir / "data"),
            "XDG_CONFIG_HOME": str(workdir / "config"),
            "HOME": str(workdir),
        }
    return {}


def _nginx(ls: Listen, d: Path) -> list[str]:
    temp = "".join(
        f"    {k}_temp_path {d / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = f"""user root;
worker_processes {WORKERS};
pid {d / "nginx.pid"};
error_log {d / "error.log"} warn;
events {{ worker_connections 16384; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {d / "access.log"};
{temp}    sendfile on;
    keepalive_timeout 65;
    server {{
        listen {ls.addr}:{ls.port} reuseport;
        listen {ls.addr}:{ls.tls_port} ssl http2 reuseport;
        server_name {ls.server_name};
        ssl_certificate {ls.cert};
        ssl_certificate_key {ls.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        root {ls.docroot};
    }}
}}
"""
    write_atomic(d / "nginx.conf", conf)
    return ["nginx", "-p", str(d), "-c", str(d / "nginx.conf"), "-g", "daemon off;"]


def _h2o(ls: Listen, d: Path) -> list[str]:
    conf = f"""user: root
num-threads: {WORKERS}
error-log: {d / "error.log"}
access-log: {d / "access.log"}
listen:
  host: {ls.addr}
  port: {ls.port}
listen:
  host: {ls.addr}
  port: {ls.tls_port}
  ssl:
    certificate-file: {ls.cert}
    key-file: {ls.key}
    minimum-version: TLSv1.2
hosts:
  default:
    paths:
      /:
        file.dir: {ls.docroot}
"""
    write_atomic(d / "h2o.conf", conf)
    return ["h2o", "-c", str(d / "h2o.conf")]


def _caddy(ls: Listen, d: Path) -> list[str]:
    conf = f"""{{
    admin off
    auto_https off
    storage file_system {d / "data"}
}}
https://{ls.server_name}:{ls.tls_port} {{
    bind {ls.addr}
    tls {ls.cert} {ls.key}
    root * {ls.docroot}
    file_server
    log {{
        output file {d / "access.log"}
    }}
}}
http://:{ls.port} {{
    bind {ls.addr}
    root * {ls.docroot}
    file_server
}}
"""
    write_atomic(d / "Caddyfile", conf)
    return ["caddy", "run", "--config", str(d / "Caddyfile"), "--adapter", "caddyfile"]


def _lighttpd(ls: Listen, d: Path) -> list[str]:
    mime = ", ".join(f'"{ext}" => "{typ}"' for ext, typ in _MIME.items())
    conf = f"""server.modules = ("mod_openssl", "mod_accesslog")
server.document-root = "{ls.docroot}"
server.bind = "{ls.addr}"
server.port = {ls.port}
server.max-worker = {WORKERS}
server.errorlog = "{d / "error.log"}"
accesslog.filename = "{d / "access.log"}"
server.feature-flags += ("server.h2proto" => "enable")
mimetype.assign = ({mime})
$SERVER["socket"] == "{ls.addr}:{ls.tls_port}" {{
    ssl.engine = "enable"
    ssl.pemfile = "{ls.cert}"
    ssl.privkey = "{ls.key}"
}}
"""
    write_atomic(d / "lighttpd.conf", conf)
    return ["lighttpd", "-D", "-f", str(d / "lighttpd.conf")]
