"""One page load in headless Chromium, timed by the browser itself.

Chromium is driven over its DevTools protocol on a pipe (`--remote-debugging-pipe`: commands
in on fd 3, replies and events out on fd 4, each a JSON object ended by a NUL byte), so no
WebSocket library and no port are needed and the browser can run in any network namespace
(the caller's `popen` starts it, e.g. the testbed's `client_popen`). Each load starts a fresh
browser with a fresh profile in a temporary directory, removed afterwards: no cache, no
connection, no TLS session survives from one load to the next.

What a load reports is the page's own Performance API, in milliseconds from the navigation's
start (`performance.timeOrigin`): the HTML's `responseEnd`, `domContentLoadedEventEnd`, the
load event's start, first contentful paint, the last largest-contentful-paint candidate, the
protocol the HTML came over, and each resource's timings and sizes. The browser's own start
(~1 s here) is outside these times. A resource that failed still has a Performance entry (its
sizes 0), and the load event still fires: the DevTools network events name each failure and
its error (`failed_resources`), so such a load is not taken for a whole page.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kit import LabError

#: Flags of every load: headless, no GPU, no sandbox (the lab runs as root), nothing the
#: browser would fetch or do on its own beside the page, no QUIC (the servers speak TCP).
BASE_FLAGS = (
    "--headless=new",
    "--remote-debugging-pipe",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--ignore-certificate-errors",
)
#: The longest DevTools message read (a page's resource list is a few KB): a longer one is an
#: error, not a buffer that grows without end.
MAX_MESSAGE_BYTES = 8 << 20
#: Seconds the browser may take to start and open a tab.
START_TIMEOUT_S = 30.0
#: Seconds the browser may take to exit after `Browser.close` (and again after it is killed):
#: measured, a browser under a loaded link often lingers past 10 s, and its figures are taken.
CLOSE_TIMEOUT_S = 2.0
#: Milliseconds waited after the load event for a last largest-contentful-paint candidate.
LCP_SETTLE_MS = 100

#: Evaluated in the page after its load event: every figure of `PageLoad`, as JSON.
_METRICS_JS = f"""new Promise(done => {{
  let lcp = null;
  try {{
    new PerformanceObserver(list => {{ for (const e of list.getEntries()) lcp = e.startTime; }})
      .observe({{type: 'largest-contentful-paint', buffered: true}});
  }} catch (e) {{}}
  setTimeout(() => {{
    const n = performance.getEntriesByType('navigation')[0];
    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
    done(JSON.stringify({{
      protocol: n.nextHopProtocol,
      response_end_ms: n.responseEnd,
      dom_content_loaded_ms: n.domContentLoadedEventEnd,
      load_event_ms: n.loadEventStart,
      fcp_ms: fcp ? fcp.startTime : null,
      lcp_ms: lcp,
      html_bytes: n.encodedBodySize,
      resources: performance.getEntriesByType('resource').map(r => ({{
        url: r.name, protocol: r.nextHopProtocol, type: r.initiatorType,
        body_bytes: r.encodedBodySize, transfer_bytes: r.transferSize,
        start_ms: r.startTime, response_start_ms: r.responseStart, response_end_ms: r.responseEnd,
      }})),
    }}));
  }}, {LCP_SETTLE_MS});
}})"""


class BrowserError(LabError, RuntimeError):
    """Chromium failed to start, broke the protocol, or the page did not load in time."""


@dataclass(frozen=True)
class PageLoad:
    """One page load's figures, in ms from the navigation's start (None: the browser had none)."""

    protocol: str
    response_end_ms: float
    dom_content_loaded_ms: float
    load_event_ms: float
    fcp_ms: float | None
    lcp_ms: float | None
    html_bytes: int
    resources: list[dict[str, Any]] = field(default_factory=list)
    #: Each request of the page that failed before the load event: its `url` and the
    #: browser's `error` (e.g. `net::ERR_HTTP2_PROTOCOL_ERROR`).
    failed_resources: list[dict[str, str]] = field(default_factory=list)

    @property
    def page_bytes(self) -> int:
        """The HTML's and every resource's body bytes, as received (encoded)."""
        return self.html_bytes + sum(int(r.get("body_bytes") or 0) for r in self.resources)


class Pipe:
    """The DevTools protocol over the two pipes: numbered commands, replies matched by id."""

    def __init__(self, to_browser: int, from_browser: int):
        self._out, self._in = to_browser, from_browser
        self._buf = b""
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._out, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise BrowserError(f"the browser closed its DevTools pipe (it exited): {e}") from e
        return self._next_id

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next message, or BrowserError at the deadline (time.monotonic()) or at EOF."""
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("no reply from the browser in time")
            ready, _, _ = select.select([self._in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise BrowserError("the browser closed its DevTools pipe (it exited)")
            self._buf += chunk
            if len(self._buf) > MAX_MESSAGE_BYTES:
                raise BrowserError(f"a DevTools message longer than {MAX_MESSAGE_BYTES} bytes")
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict[str, Any] | None, session: str | None, deadline: float) -> Any:
        """Sends a command and returns its result (events read meanwhile are dropped)."""
        want = self.send(method, params, session)
        while True:
            msg = self.receive(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error'].get('message', msg['error'])}")
                return msg.get("result", {})

    def wait_event(
        self, method: str, deadline: float, others: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """The next event `method`; every other message read meanwhile goes to `others`."""
        while True:
            msg = self.receive(deadline)
            if msg.get("method") == method:
                return msg
            if others is not None:
                others(msg)


Popen = Callable[..., subprocess.Popen]


def _start(popen: Popen, argv: list[str], stderr: Any) -> tuple[subprocess.Popen, Pipe]:
    """Starts the browser with its ends of two pipes on fds 3 and 4: bash moves them there
    and execs the browser (no pre-exec hook, which `popen`'s own wrapping could not keep)."""
    cmd_r, cmd_w = os.pipe()
    ev_r, ev_w = os.pipe()
    # The child's ends renumbered 10 and above, so moving them to 3 and 4 clobbers nothing.
    cmd_r, ev_w = _numbered_high(cmd_r), _numbered_high(ev_w)
    move = f'exec "$@" 3<&{cmd_r} 4>&{ev_w} {cmd_r}<&- {ev_w}>&-'
    try:
        proc = popen(
            ["bash", "-c", move, "bash", *argv],
            pass_fds=(cmd_r, ev_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own process group, killed whole if it hangs
        )
    except BaseException:
        for fd in (cmd_w, ev_r):
            os.close(fd)
        raise
    finally:
        os.close(cmd_r)
        os.close(ev_w)
    return proc, Pipe(cmd_w, ev_r)


def _numbered_high(fd: int) -> int:
    """`fd` moved to a number of 10 or above (closed on exec unless passed on)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def load_page(
    chromium: str,
    url: str,
    flags: Sequence[str] = (),
    popen: Popen = subprocess.Popen,
    timeout_s: float = 60.0,
    log_path: str | os.PathLike[str] | None = None,
) -> PageLoad:
    """Loads `url` once in a fresh headless Chromium (extra `flags`, e.g. `--disable-http2`,
    `--host-resolver-rules=...`), started by `popen`; waits for the load event, at most
    `timeout_s` from the navigation; the browser's stderr goes to `log_path` (appended)."""
    profile = tempfile.mkdtemp(prefix="sf-browser-")
    argv = [chromium, *BASE_FLAGS, f"--user-data-dir={profile}", *flags, "about:blank"]
    with open(log_path or os.devnull, "ab") as err:
        proc, pipe = _start(popen, argv, err)
        try:
            return _navigate(pipe, url, timeout_s)
        finally:
            _close(proc, pipe)
            shutil.rmtree(profile, ignore_errors=True)


def _navigate(pipe: Pipe, url: str, timeout_s: float) -> PageLoad:
    start_by = time.monotonic() + START_TIMEOUT_S
    target = pipe.call("Target.createTarget", {"url": "about:blank"}, None, start_by)["targetId"]
    session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True}, None, start_by)
    sid = session["sessionId"]
    pipe.call("Page.enable", None, sid, start_by)
    pipe.call("Network.enable", {"maxTotalBufferSize": 0, "maxResourceBufferSize": 0}, sid, start_by)
    deadline = time.monotonic() + timeout_s
    failures = _Failures()
    nav = pipe.call("Page.navigate", {"url": url}, sid, deadline)
    if nav.get("errorText"):
        raise BrowserError(f"{url}: {nav['errorText']}")
    try:
        pipe.wait_event("Page.loadEventFired", deadline, failures.see)
    except BrowserError as e:
        raise BrowserError(f"{url}: no load event within {timeout_s:g} s ({e})") from e
    res = pipe.call(
        "Runtime.evaluate",
        {"expression": _METRICS_JS, "awaitPromise": True, "returnByValue": True},
        sid,
        time.monotonic() + 10.0,
    )
    if "exceptionDetails" in res:
        raise BrowserError(f"{url}: the metrics script failed: {res['exceptionDetails'].get('text')}")
    return page_load_from({**json.loads(res["result"]["value"]), "failed_resources": failures.failed})


class _Failures:
    """The page's failed requests, from the DevTools network events read while the page
    loads: each request's URL (`Network.requestWillBeSent`) and its error, unless the page
    itself cancelled it (`Network.loadingFailed`). At most `MAX_REQUESTS` URLs and as many
    failures are kept (a page of more requests is not one this lab loads)."""

    MAX_REQUESTS = 10_000

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}
        self.failed: list[dict[str, str]] = []

    def see(self, msg: dict[str, Any]) -> None:
        params = msg.get("params") or {}
        if msg.get("method") == "Network.requestWillBeSent" and len(self.urls) < self.MAX_REQUESTS:
            self.urls[params.get("requestId", "")] = params.get("request", {}).get("url", "")
        elif (
            msg.get("method") == "Network.loadingFailed"
            and not params.get("canceled")
            and len(self.failed) < self.MAX_REQUESTS
        ):
            url = self.urls.get(params.get("requestId", ""), "?")
            self.failed.append({"url": url, "error": str(params.get("errorText", ""))})


def page_load_from(d: dict[str, Any]) -> PageLoad:
    """A `PageLoad` from the metrics script's JSON (also how a stored load is read back)."""
    return PageLoad(
        protocol=str(d.get("protocol") or ""),
        response_end_ms=float(d["response_end_ms"]),
        dom_content_loaded_ms=float(d["dom_content_loaded_ms"]),
        load_event_ms=float(d["load_event_ms"]),
        fcp_ms=None if d.get("fcp_ms") is None else float(d["fcp_ms"]),
        lcp_ms=None if d.get("lcp_ms") is None else float(d["lcp_ms"]),
        html_bytes=int(d.get("html_bytes") or 0),
        resources=list(d.get("resources") or []),
        failed_resources=list(d.get("failed_resources") or []),
    )


def _close(proc: subprocess.Popen, pipe: Pipe) -> None:
    """Asks the browser to close; if it has not within `CLOSE_TIMEOUT_S`, kills its process
    group (the browser and every helper process it started); closes our pipe ends. A
    browser that outlives even that is left to the testbed's teardown, not raised."""
    try:
        pipe.send("Browser.close")
    except BrowserError:
        pass
    try:
        proc.wait(timeout=CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=CLOSE_TIMEOUT_S)
    finally:
        for fd in (pipe._out, pipe._in):
            with contextlib.suppress(OSError):
                os.close(fd)
