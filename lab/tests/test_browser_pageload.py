"""Headless Chromium loads the generated page over HTTPS from a real `shortfirst serve`
(under the user-space pacer, as the browser experiment's arms) and from nginx configured by
`testbed.peers`, over HTTP/1.1 and HTTP/2, on loopback: the protocol is the one asked for,
every object of the page arrives whole, and the browser's timings are in order.

Needs Chromium (Debian package `chromium`) and the release build; nginx for its case.
About 15 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab.analysis.browsercheck import find_chromium
from shortfirst_lab.kit import free_port, self_signed_cert, wait_port
from shortfirst_lab.runners.browser import SERVER_NAME
from shortfirst_lab.testbed import chromium, pages, peers

pytestmark = [
    pytest.mark.skipif(find_chromium() is None, reason="needs chromium (Debian package chromium)"),
    pytest.mark.skipif(not BIN.exists(), reason="needs the release build (make build)"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, Path, Path, pages.Page]:
    d = tmp_path_factory.mktemp("site")
    page = pages.write_generated(d / "root" / "page-generated", seed=5)
    cert, key = self_signed_cert(d / "tls", dns=(SERVER_NAME,), ips=())
    return d / "root", cert, key, page


def _load(port: int, page: pages.Page, protocol: str, log: Path) -> chromium.PageLoad:
    flags = [f"--host-resolver-rules=MAP {SERVER_NAME} 127.0.0.1"] + (
        ["--disable-http2"] if protocol == "h1" else []
    )
    url = f"https://{SERVER_NAME}:{port}{page.path}"
    return chromium.load_page(find_chromium() or "chromium", url, flags, timeout_s=30, log_path=log)


def _check(load: chromium.PageLoad, protocol: str, root: Path) -> None:
    assert load.failed_resources == []
    assert load.protocol == {"h1": "http/1.1", "h2": "h2"}[protocol]
    files = {p.name: p.stat().st_size for p in (root / "page-generated").iterdir() if p.name != "index.html"}
    # The browser also asks for /favicon.ico (not found here): not the page's.
    got = {r["url"].rsplit("/", 1)[1]: r for r in load.resources if not r["url"].endswith("/favicon.ico")}
    assert set(got) == set(files)
    for name, size in files.items():
        assert got[name]["body_bytes"] == size, name
        assert got[name]["protocol"] == load.protocol, name
    assert 0 < load.response_end_ms <= load.dom_content_loaded_ms <= load.load_event_ms
    assert load.fcp_ms is not None and load.fcp_ms <= load.load_event_ms + 1000
    favicon = sum(r["body_bytes"] for r in load.resources if r["url"].endswith("/favicon.ico"))
    html = (root / "page-generated" / "index.html").stat().st_size
    assert load.page_bytes == sum(files.values()) + html + favicon


def test_a_resource_that_fails_is_named_with_its_error(tmp_path):
    # The load event fires and the failed image has a Performance entry of 0 bytes: only the
    # network events say that it failed, and why.
    dead = free_port()  # nothing listens there
    (tmp_path / "page.html").write_text(f'<img src="https://{SERVER_NAME}:{dead}/gone.png"><p>text</p>')
    load = chromium.load_page(find_chromium() or "chromium", (tmp_path / "page.html").as_uri(),
                              [f"--host-resolver-rules=MAP {SERVER_NAME} 127.0.0.1"], timeout_s=30,
                              log_path=tmp_path / "browser.log")  # fmt: skip
    assert load.failed_resources == [
        {"url": f"https://{SERVER_NAME}:{dead}/gone.png", "error": "net::ERR_CONNECTION_REFUSED"}
    ]


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_chromium_loads_a_page_from_serve_under_the_pacer(site, protocol, tmp_path):
    root, cert, key, page = site
    port, tls_port = free_port(), free_port()
    argv = [str(BIN), "serve", "--root", str(root), "--listen", f"127.0.0.1:{port}",
            "--tls-listen", f"127.0.0.1:{tls_port}", "--tls-cert", str(cert), "--tls-key", str(key),
            "--policy", "srpt", "--scheduler", "user", "--link-rate", "50000000"]  # fmt: skip
    with open(tmp_path / "serve.log", "w") as log:
        srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(tls_port, srv)
        _check(_load(tls_port, page, protocol, tmp_path / "browser.log"), protocol, root)
    finally:
        srv.terminate()
        srv.wait(10)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx (Debian package nginx)")
@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_chromium_loads_the_page_from_nginx_as_the_peers_configure_it(site, protocol, tmp_path):
    root, cert, key, page = site
    port, tls_port = free_port(), free_port()
    ls = peers.Listen("127.0.0.1", port, tls_port, root, cert, key, SERVER_NAME)
    argv = peers.peer_argv("nginx", ls, tmp_path / "nginx")
    with open(tmp_path / "nginx.log", "w") as log:
        srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, **peers.peer_env("nginx", tmp_path)})  # fmt: skip
    try:
        wait_port(tls_port, srv)
        _check(_load(tls_port, page, protocol, tmp_path / "browser.log"), protocol, root)
    finally:
        srv.terminate()
        srv.wait(10)


def test_the_rust_book_copy_loads_whole_without_the_internet(tmp_path):
    """The copied chapter's scripts would ask the Rust playground for its crates; the copy
    turns that off, so every request of the page stays on the server under test."""
    try:
        pages.rust_docs()
    except pages.PageError as e:
        pytest.skip(f"no Rust documentation to copy: {e}")
    page = pages.copy_rust_book(tmp_path / "root" / "book")
    cert, key = self_signed_cert(tmp_path / "tls", dns=(SERVER_NAME,), ips=())
    port, tls_port = free_port(), free_port()
    argv = [str(BIN), "serve", "--root", str(tmp_path / "root"), "--listen", f"127.0.0.1:{port}",
            "--tls-listen", f"127.0.0.1:{tls_port}", "--tls-cert", str(cert), "--tls-key", str(key),
            "--socket-priority=false"]  # fmt: skip
    with open(tmp_path / "serve.log", "w") as log:
        srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(tls_port, srv)
        load = _load(tls_port, page, "h2", tmp_path / "browser.log")
    finally:
        srv.terminate()
        srv.wait(10)
    assert load.failed_resources == [], load.failed_resources
    assert load.load_event_ms > 0 and load.html_bytes > 10_000
