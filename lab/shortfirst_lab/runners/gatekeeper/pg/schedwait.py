"""How long the proxy and the database's backends waited for the CPU during a point's
measured window: the kernel's scheduler statistics of every thread (`kit.sched_snapshot`),
taken when the window opens and when it closes, by a thread that sleeps until then.

A transaction through a proxy needs the proxy to run twice (the client's message in, the
server's answer out) on top of the backend: where the proxy shares the database's CPU with
backends running long statements, each of those wake-ups can wait behind them. The mean wait
per time on the CPU of the proxy beside that of the backends says whether it does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from ....kit import child_pids, sched_delta, sched_snapshot


class SchedWindow:
    """Snapshots of the proxies `proxy_pids` and of the postmaster `postmaster_pid`'s children
    at `start_s` and `end_s` (epoch seconds); `result()` after the window."""

    def __init__(self, proxy_pids: Sequence[int], postmaster_pid: int | None, start_s: float, end_s: float):
        self._groups: dict[str, Callable[[], list[int]]] = {"proxy": lambda: list(proxy_pids)}
        if postmaster_pid is not None:
            self._groups["database"] = lambda: child_pids(postmaster_pid)
        self._at = (start_s, end_s)
        self._snaps: list[dict[str, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sched-window", daemon=True)

    def __enter__(self) -> SchedWindow:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        for at in self._at:
            if self._stop.wait(max(0.0, at - time.time())):
                return
            self._snaps.append({g: sched_snapshot(pids()) for g, pids in self._groups.items()})

    def result(self) -> dict | None:
        """Each group's `kit.sched_delta` over the window; None if the window did not close
        while the point ran."""
        if len(self._snaps) < 2:
            return None
        first, last = self._snaps
        return {g: sched_delta(first[g], last[g]) for g in self._groups if first[g] or last[g]}
