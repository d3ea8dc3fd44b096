"""Browser experiment runner: headless Chromium loads pages over HTTPS from the server behind
the shaped uplink while `shortfirst load` replays the background downloads::

    DIR/experiment.toml, DIR/provenance.json, DIR/tls/{cert,key}.pem
    DIR/workload/{docroot/,trace.csv,...}     the background's workload (`static.generate_workload`),
                                              with the pages written into its docroot
    DIR/runs/<server>-<protocol>-<idle|loadρ>/
        pageloads.jsonl                       one line per page load: the page, its index, the
                                              wall time it started (s from the background's
                                              start), and the browser's figures
                                              (`testbed.chromium.PageLoad`), or the error; first
                                              one warm-up load per page (`"warmup": true`)
        requests.csv, summary.json, received.csv   the background's logs (none when idle)
        server.log, browser.log, load.log, commands.txt, uplink.json, server_metrics.txt
        peer/                                 a peer's configuration and logs
        run.json                              status, server, protocol, load, exit codes

A cell's server is one of the experiment's arms of `shortfirst serve` (plaintext on
`server.port` for the background, HTTPS on `browser.tls_port`) or a peer from Debian with the
same two listeners (`testbed.peers`) on the kernel's band tree, where its traffic shares one
band as `serve --policy fair`'s does. The browser resolves the page's host name to the
server's address (`--host-resolver-rules`), trusts any certificate, and speaks HTTP/2 unless
the cell's protocol is h1 (`--disable-http2`). The summary and the page are
`analysis.browserreport`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

from .. import commands
from ..analysis import browserreport
from ..kit import self_signed_cert, utc_now, write_atomic, write_json
from ..spec.browser import BrowserExperiment, BrowserRun
from ..testbed import chromium, peers
from ..testbed.pages import Page, write_pages
from ..testbed.placement import Placement
from .stage import make_stage, unstage
from .static import Runner, RunnerError, _log, _write_commands, check_can_run, generate_workload

#: The host name the pages are loaded from (the certificate's name; resolved by the browser).
SERVER_NAME = "page.test"


class BrowserRunner(Runner):
    """`Runner` whose cells are page loads in a browser over a background of downloads."""

    def __init__(
        self,
        browser: BrowserExperiment,
        out: Path,
        bin_path: Path,
        resume: bool = False,
        progress: bool = True,
        placement: Placement | None = None,
    ):
        # Absolute: a peer reads the certificate and the docroot from its own directory.
        out = out.resolve()
        super().__init__(browser.exp, out, bin_path, resume=resume, progress=progress, placement=placement)
        self.browser = browser
        self.pages: list[Page] = []
        self.cert: Path | None = None
        self.key: Path | None = None

    # ----------------------------------------------------------------- one cell

    def cell_server_argv(self, tb: Any, run: BrowserRun, rdir: Path) -> tuple[list[str], dict[str, str]]:
        """The cell's server command and extra environment."""
        assert self.cert is not None and self.key is not None and self.docroot is not None
        if run.peer:
            ls = peers.Listen(tb.server_addr, self.exp.server.port, self.browser.tls_port,
                              self.docroot, self.cert, self.key, SERVER_NAME)  # fmt: skip
            return peers.peer_argv(run.peer, ls, rdir / "peer"), peers.peer_env(run.peer, rdir / "peer")
        assert run.spec is not None
        argv = self.server_argv(tb, run.spec.policy, run.spec.scheduler)
        argv += ["--tls-listen", f"{tb.server_addr}:{self.browser.tls_port}",
                 "--tls-cert", str(self.cert), "--tls-key", str(self.key)]  # fmt: skip
        return argv, {}

    def browser_flags(self, tb: Any, run: BrowserRun) -> list[str]:
        flags = [f"--host-resolver-rules=MAP {SERVER_NAME} {tb.server_addr}"]
        if run.protocol == "h1":
            flags.append("--disable-http2")
        return flags

    def load_once(self, tb: Any, run: BrowserRun, rdir: Path, page: Page, t0: float) -> dict[str, Any]:
        """One load of `page`: its line of pageloads.jsonl (the figures, or the error; a load
        with a failed resource has both and counts as failed)."""
        b = self.browser
        url = f"https://{SERVER_NAME}:{b.tls_port}{page.path}"
        rec: dict[str, Any] = {"page": page.name, "start_s": round(time.monotonic() - t0, 3)}
        try:
            load = chromium.load_page(b.chromium, url, self.browser_flags(tb, run), popen=tb.client_popen,
                                      timeout_s=b.page_timeout_s, log_path=rdir / "browser.log")  # fmt: skip
            rec.update(vars(load))
            if load.failed_resources:  # the load event came, but not with the whole page
                failed = (f"{f['url']} ({f['error']})" for f in load.failed_resources)
                rec["error"] = "failed: " + "; ".join(failed)
        except chromium.BrowserError as e:
            rec["error"] = str(e)
        return rec

    def page_loads(
        self, tb: Any, run: BrowserRun, rdir: Path, t0: float, gen: subprocess.Popen | None
    ) -> int:
        """Loads the pages in turn until each has `loads_per_cell` loads, or (with a
        background) until less than a page timeout of it is left; returns the loads that
        failed. Each load is a line of pageloads.jsonl as soon as it ends."""
        b = self.browser
        end = t0 + self.exp.run.duration_s - b.page_timeout_s if gen is not None else float("inf")
        failed = 0
        with open(rdir / "pageloads.jsonl", "a") as out:
            for i in range(b.loads_per_cell):
                for page in self.pages:
                    if time.monotonic() > end or (gen is not None and gen.poll() is not None):
                        return failed
                    rec = {"index": i, **self.load_once(tb, run, rdir, page, t0)}
                    failed += "error" in rec
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
        return failed

    def warm_up(self, tb: Any, run: BrowserRun, rdir: Path) -> None:
        """One load of each page before the cell's clock starts, kept apart (`"warmup": true`,
        left out of every figure): the client namespace's network settles (Chromium fails a
        load with ERR_NETWORK_CHANGED while its addresses still change) and the server reads
        the page's files once, in every cell alike."""
        t0 = time.monotonic()
        with open(rdir / "pageloads.jsonl", "a") as out:
            for page in self.pages:
                out.write(json.dumps({"warmup": True, **self.load_once(tb, run, rdir, page, t0)}) + "\n")

    def cell(self, run: BrowserRun, rdir: Path) -> dict[str, Any]:
        """One cell on a fresh testbed: server, background (unless idle), page loads; returns
        the run record."""
        scheduler = run.spec.scheduler if run.spec else "kernel"
        rec: dict[str, Any] = {"started_utc": utc_now(), "server": run.server_label, "protocol": run.protocol}
        t_wall = time.monotonic()
        with (
            self.testbed(None, None, scheduler) as tb,
            open(rdir / "server.log", "w") as slog,
            open(rdir / "load.log", "w") as llog,
        ):
            rec["testbed"] = {"run_id": tb.run_id, "server_addr": tb.server_addr, "server_ns": tb.server_ns}
            s_argv, env = self.cell_server_argv(tb, run, rdir)
            l_argv = []
            if run.load:  # the background: the same arrivals in every cell at this load
                extra = self.load_args(self.trace_for_load(run.load), run.load, self.exp.seed)
                l_argv = commands.load(
                    self.bin, f"http://{tb.server_addr}:{self.exp.server.port}", out=rdir, extra=extra
                )
            where = f"server in {tb.server_ns}, load generator and browser in {tb.client_ns[0]}"
            _write_commands(rdir / "commands.txt", [s_argv, *([l_argv] if l_argv else [])], where)
            # A peer in a process group of its own: lighttpd's master passes its stop signal
            # to its whole group (kill(0, ...)), which would otherwise be this run's.
            srv = tb.server_popen(s_argv, stdout=slog, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                  start_new_session=bool(run.peer))  # fmt: skip
            gen = None
            try:
                self.wait_listening(tb, srv, rdir / "server.log")
                self.warm_up(tb, run, rdir)
                t0 = time.monotonic()
                if l_argv:
                    gen = tb.client_popen(l_argv, stdout=llog, stderr=subprocess.STDOUT)
                    time.sleep(self.exp.run.warmup_s)
                rec["failed_loads"] = self.page_loads(tb, run, rdir, t0, gen)
                rec["status"] = self._finish_background(gen, srv, t0)
            except RunnerError as e:
                rec["status"] = f"failed: {e}"
            finally:
                if gen is not None:
                    rec["load_rc"] = self.stop(gen, 10)
                with contextlib.suppress(Exception):
                    write_json(rdir / "uplink.json", tb.uplink_stats())
                if srv.poll() is None and not run.peer:
                    write_atomic(rdir / "server_metrics.txt", self.scrape_metrics(tb))
                rec["server_rc"] = self.stop(srv)
        rec["finished_utc"] = utc_now()
        rec["wall_s"] = round(time.monotonic() - t_wall, 3)
        return rec

    def _finish_background(self, gen: subprocess.Popen | None, srv: subprocess.Popen, t0: float) -> str:
        """Waits for the background to end (its duration, then at most `run.drain_timeout_s`);
        the cell's status."""
        if gen is not None:
            try:
                gen.wait(
                    timeout=max(
                        0.0, t0 + self.exp.run.duration_s + self.exp.run.drain_timeout_s - time.monotonic()
                    )
                )
            except subprocess.TimeoutExpired:
                return "failed: the background did not finish in time"
            if gen.returncode != 0:
                return f"failed: load generator exited with {gen.returncode} (see load.log)"
        if srv.poll() is not None:
            return f"failed: server exited with {srv.returncode} during the run (see server.log)"
        return "ok"

    def run_cell(self, run: BrowserRun) -> dict[str, Any]:
        final_dir = self.out / "runs" / run.run_id
        if final_dir.exists():
            shutil.rmtree(final_dir)
        final_dir.mkdir(parents=True)
        rdir = make_stage(run.run_id) or final_dir
        try:
            rec = self.cell(run, rdir)
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
            write_atomic(rdir / "runner_error.txt", traceback.format_exc())
            rec = {"status": f"failed: {type(e).__name__}: {e} (see runner_error.txt)"}
        finally:
            if rdir != final_dir:
                unstage(rdir, final_dir)
        rec.update(run=run.run_id, load=run.load, server=run.server_label, protocol=run.protocol)
        write_json(final_dir / "run.json", rec)
        return rec

    # ------------------------------------------------------------ the experiment

    def run(self) -> dict[str, Any]:  # type: ignore[override]
        self.out.mkdir(parents=True, exist_ok=True)
        # The file as run (its overrides applied), read back by the report.
        write_atomic(self.out / "experiment.toml", self.exp.source)
        self.write_provenance()
        self.trace = generate_workload(self.exp, self.out, self.bin)
        self.docroot = self.trace.parent / "docroot"
        self.pages = write_pages(self.browser.pages, self.docroot, self.exp.seed)
        self.cert, self.key = self_signed_cert(self.out / "tls", dns=(SERVER_NAME,), ips=())
        matrix = self.browser.matrix()
        for k, run in enumerate(matrix, 1):
            done = self.out / "runs" / run.run_id / "run.json"
            if self.resume and done.exists() and json.loads(done.read_text()).get("status") == "ok":
                continue
            _log(f"[{k}/{len(matrix)}] {run.run_id}")
            rec = self.run_cell(run)
            _log(
                f"  {rec['status']} ({rec.get('wall_s', 0):.0f} s, {rec.get('failed_loads', 0)} failed loads)"
            )
        return browserreport.build(self.out)


def run_browser_experiment(
    browser: BrowserExperiment,
    out: Path,
    bin_path: Path,
    resume: bool = False,
    progress: bool = True,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """Runs every cell of `browser` into `out`, then writes the summary and the page."""
    check_can_run(bin_path)
    if shutil.which(browser.chromium) is None and not Path(browser.chromium).exists():
        raise RunnerError(f"browser.chromium: {browser.chromium!r} not found (Debian package chromium)")
    runner = BrowserRunner(
        browser, out, bin_path.resolve(), resume=resume, progress=progress, placement=placement
    )
    return runner.run()
