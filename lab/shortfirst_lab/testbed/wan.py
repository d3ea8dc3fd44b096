"""WAN emulation: client groups with their own RTT, jitter and loss between the
clients and the server, through ``shortfirst netem`` (a TUN delay line in its
own namespace; this kernel has no netem qdisc).

- :class:`Group` and :func:`netem_config` write the emulator's TOML;
- :func:`tcp_sysctls` names a namespace's congestion control and sizes its
  socket buffers for the largest RTT;
- :func:`setup_emulator_namespace` turns a namespace into the router that
  sends every forwarded packet through the TUN (policy routing);
- :class:`Emulator` starts ``shortfirst netem`` in it, stops it and reads its
  counters, plus the TUN's own drop counters (no hidden drops);
- :class:`WanPath` is a self-contained client -- emulator -- server path of
  three namespaces, for the validation tests and ``make bench-netem``.

Topology of a :class:`WanPath` (run id ``<id>``, names share the testbed's
prefix scheme so :func:`testbed.cleanup_leftovers` removes crashed runs)::

    sfw<id>-c0                     sfw<id>-sw (emulator)                 sfw<id>-srv
    sfw<id>-c  10.78.<g+1>.2/24 == sfw<id>-e   10.78.<g+1>.1/24
               (one address per group)          sfw<id>-t  (TUN)
                                   sfw<id>-es  10.77.0.2/24 ========== sfw<id>-s 10.77.0.1/24

``ip rule iif <veth> lookup 100`` on both veths and ``default dev <tun> table
100`` send every forwarded packet into the TUN; what the emulator writes back
enters with ``iif <tun>`` and is routed by the main table.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import bed as testbed
from .netns import TestbedError, _add_netns, _delete_netns, _list_netns, _lock_path, _run, _try_lock

#: Routing table the emulator namespace sends forwarded packets to.
EMU_TABLE = 100
#: Seconds ``shortfirst netem`` may take to print ``ready``.
READY_TIMEOUT_S = 10.0
#: Congestion controls a child namespace may make its default (others need
#: TCP_CONGESTION per socket: only the initial namespace may set a
#: restricted algorithm as default).
NAMESPACE_DEFAULT_CC = ("reno", "bbr")


@dataclass(frozen=True)
class Group:
    """One client group: its subnet and path properties (per RTT, both directions)."""

    name: str
    subnet: str
    rtt_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0
    loss_down: float | None = None
    loss_up: float | None = None
    rate_bits_per_s: int | None = None


def netem_config(
    groups: list[Group],
    tun: str,
    seed: int = 1,
    jitter_mode: str = "fifo",
    down_fraction: float = 0.5,
    queue_packets: int | None = None,
) -> str:
    """The TOML ``shortfirst netem --config`` reads (it checks every key again)."""
    lines = [
        f'tun = "{tun}"',
        f"seed = {int(seed)}",
        f'jitter_mode = "{jitter_mode}"',
        f"down_fraction = {float(down_fraction)!r}",
    ]
    if queue_packets is not None:
        lines.append(f"queue_packets = {int(queue_packets)}")
    for g in groups:
        lines += ["", "[[group]]", f'name = "{g.name}"', f'subnets = ["{g.subnet}"]']
        lines += [
            f"rtt_ms = {float(g.rtt_ms)!r}",
            f"jitter_ms = {float(g.jitter_ms)!r}",
            f"loss = {float(g.loss)!r}",
        ]
        if g.loss_down is not None:
            lines.append(f"loss_down = {float(g.loss_down)!r}")
        if g.loss_up is not None:
            lines.append(f"loss_up = {float(g.loss_up)!r}")
        if g.rate_bits_per_s is not None:
            lines.append(f"rate_bits_per_s = {int(g.rate_bits_per_s)}")
    return "\n".join(lines) + "\n"


def socket_buffer_max_bytes(max_rtt_ms: float, rate_bits_per_s: float) -> int:
    """A socket buffer limit that does not cap one flow below ``rate`` at
    ``max_rtt``: twice the bandwidth-delay product (the kernel counts skb
    overhead against it), at least the 4 MiB default, at most 256 MiB."""
    bdp = rate_bits_per_s / 8 * max_rtt_ms / 1000
    return int(min(256 << 20, max(4 << 20, 2 * bdp)))


def tcp_sysctls(congestion_control: str | None, max_rtt_ms: float, rate_bits_per_s: float) -> dict[str, str]:
    """Namespace TCP that does not depend on the host: no cached metrics
    across connections, buffers for the largest RTT, the named default CC
    (None keeps the kernel's; cubic cannot be a child namespace's default)."""
    buf = socket_buffer_max_bytes(max_rtt_ms, rate_bits_per_s)
    out = {
        "net.ipv4.tcp_no_metrics_save": "1",
        "net.ipv4.tcp_wmem": f"4096 16384 {buf}",
        "net.ipv4.tcp_rmem": f"4096 131072 {buf}",
    }
    if congestion_control is not None:
        if congestion_control not in NAMESPACE_DEFAULT_CC:
            raise ValueError(
                f"congestion_control {congestion_control!r}: a child namespace can only default to "
                f"{' or '.join(NAMESPACE_DEFAULT_CC)} (others need TCP_CONGESTION per socket)"
            )
        out["net.ipv4.tcp_congestion_control"] = congestion_control
    return out


def apply_sysctls(ns: str, sysctls: dict[str, str]) -> None:
    for key, value in sysctls.items():
        _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"])


def setup_emulator_namespace(ns: str, devs: list[str], tun: str, txqueuelen: int = 10_000) -> None:
    """Forwarding on, reverse-path filter off (packets re-enter from the TUN
    with addresses routed elsewhere), a persistent TUN (so routes survive an
    emulator restart and traffic never bypasses it), and policy routing of
    every packet arriving on ``devs`` into the TUN."""
    sysctls = {
        "net.ipv4.ip_forward": "1",
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.default.rp_filter": "0",
    }
    apply_sysctls(ns, sysctls)
    _run(["ip", "-n", ns, "tuntap", "add", "dev", tun, "mode", "tun"])
    _run(["ip", "-n", ns, "link", "set", tun, "txqueuelen", str(txqueuelen), "up"])
    for dev in [*devs, tun]:
        apply_sysctls(ns, {f"net.ipv4.conf.{dev}.rp_filter": "0"})
    for pref, dev in enumerate(devs, start=100):
        _run(["ip", "-n", ns, "rule", "add", "pref", str(pref), "iif", dev, "lookup", str(EMU_TABLE)])
    _run(["ip", "-n", ns, "route", "add", "default", "dev", tun, "table", str(EMU_TABLE)])


def tun_counters(ns: str, tun: str) -> dict[str, int]:
    """The TUN's kernel counters: ``tx_dropped`` > 0 means the kernel dropped
    packets before the emulator could read them (a hidden loss)."""
    out = _run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", tun]).stdout
    stats = json.loads(out)[0]["stats64"]
    return {
        "rx_packets": stats["rx"]["packets"],
        "rx_dropped": stats["rx"]["dropped"],
        "tx_packets": stats["tx"]["packets"],
        "tx_dropped": stats["tx"]["dropped"],
        "tx_errors": stats["tx"]["errors"],
    }


@dataclass
class Emulator:
    """A running ``shortfirst netem`` in namespace ``ns``."""

    ns: str
    tun: str
    config_path: Path
    stats_path: Path
    proc: subprocess.Popen
    started_s: float = field(default_factory=time.monotonic)

    @classmethod
    def start(
        cls, bin_path: Path, ns: str, tun: str, config_text: str, workdir: Path, realtime: bool = True
    ) -> Emulator:
        workdir.mkdir(parents=True, exist_ok=True)
        config_path = workdir / "netem.toml"
        stats_path = workdir / "netem-stats.json"
        config_path.write_text(config_text)
        stats_path.unlink(missing_ok=True)
        argv = ["ip", "netns", "exec", ns, str(bin_path), "netem", "--config", str(config_path)]
        argv += ["--stats", str(stats_path)] + (["--realtime"] if realtime else [])
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        emu = cls(ns=ns, tun=tun, config_path=config_path, stats_path=stats_path, proc=proc)
        emu._wait_ready()
        return emu

    def _wait_ready(self) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=READY_TIMEOUT_S):
            self.proc.kill()
            raise TestbedError(f"shortfirst netem not ready after {READY_TIMEOUT_S} s")
        line = self.proc.stdout.readline().strip()
        if line != f"ready {self.tun}":
            self.proc.wait(timeout=5)
            raise TestbedError(
                f"shortfirst netem failed to start: {line!r} {self.proc.stderr.read().strip()}"
            )

    def dump(self, timeout_s: float = 5.0) -> dict:
        """Counters of the running emulator (SIGUSR1, then the file it rewrites)."""
        before = self.stats_path.stat().st_mtime_ns if self.stats_path.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.stats_path.exists() and self.stats_path.stat().st_mtime_ns != before:
                return json.loads(self.stats_path.read_text())
            time.sleep(0.02)
        raise TestbedError("shortfirst netem did not write its counters on SIGUSR1")

    def stop(self, timeout_s: float = 5.0) -> dict:
        """SIGTERM, wait, and the final counters (``complete`` true)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestbedError("shortfirst netem ignored SIGTERM") from None
        if self.proc.returncode != 0:
            raise TestbedError(
                f"shortfirst netem exited {self.proc.returncode}: {self.proc.stderr.read().strip()}"
            )
        stats = json.loads(self.stats_path.read_text())
        if not stats.get("complete"):
            raise TestbedError("shortfirst netem's final counters are missing")
        return stats


def check_conservation(stats: dict) -> list[str]:
    """Per line, every packet in is out, counted dropped, or still queued; the
    emulator's own totals agree. Returns the violations (empty: none)."""
    bad = []
    for line in stats["lines"]:
        dropped = sum(line["dropped"].values())
        if line["rx_packets"] != line["tx_packets"] + dropped + line["queued_packets"]:
            bad.append(f"{line['group']}/{line['direction']}: {line}")
    forwarded = stats["unmatched"]["packets"] + stats["not_ipv4"]["packets"]
    total_dropped = sum(stats["totals"]["dropped"].values())
    if stats["packets_in"] != stats["totals"]["rx_packets"] + forwarded:
        bad.append(f"packets_in {stats['packets_in']} != lines + forwarded")
    expected_out = stats["totals"]["tx_packets"] + forwarded - stats["forward_write_failed"]
    if stats["packets_out"] != expected_out:
        bad.append(f"packets_out {stats['packets_out']} != {expected_out}")
    if (
        stats["totals"]["rx_packets"]
        != stats["totals"]["tx_packets"] + total_dropped + stats["totals"]["queued_packets"]
    ):
        bad.append("totals do not add up")
    return bad


def binomial_interval(n: int, p: float, z: float = 2.576) -> tuple[float, float]:
    """Normal-approximation interval for the fraction of n Bernoulli(p) trials
    (z = 2.576: 99%)."""
    half = z * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def mathis_bits_per_s(mss_bytes: int, rtt_s: float, p: float, c: float = 1.22) -> float:
    """Mathis et al. 1997: steady-state reno throughput MSS/RTT * C/sqrt(p)."""
    return mss_bytes * 8 / rtt_s * c / math.sqrt(p)


class WanPath:
    """A client namespace with one address per group, the emulator namespace,
    and a server namespace; TCP pinned in both ends (reno by default)."""

    __test__ = False

    def __init__(
        self,
        run_id: str,
        groups: list[Group],
        congestion_control: str = "reno",
        max_rtt_ms: float = 400.0,
        rate_bits_per_s: float = 100e6,
        server_egress_rate_bits_per_s: int | None = None,
    ) -> None:
        if not testbed.RUN_ID_RE.match(run_id):
            raise ValueError(f"run_id {run_id!r}: expected 1 to 6 of [a-z0-9]")
        if not 1 <= len(groups) <= 200:
            raise ValueError("groups: expected 1..=200")
        if os.geteuid() != 0:
            raise PermissionError("a WAN path needs root (network namespaces)")
        for tool in ("ip", "ethtool", "sysctl"):
            if shutil.which(tool) is None:
                raise TestbedError(f"`{tool}` not found: make apt")
        self.prefix = "sfw"
        base = f"{self.prefix}{run_id}"
        self.run_id = run_id
        self.client_ns, self.emu_ns, self.server_ns = f"{base}-c0", f"{base}-sw", f"{base}-srv"
        self.client_dev, self.emu_client_dev = f"{base}-c", f"{base}-e"
        self.server_dev, self.emu_server_dev = f"{base}-s", f"{base}-es"
        self.tun = f"{base}-t"
        self.groups = list(groups)
        self.server_addr = "10.77.0.1"
        self.client_addrs = {g.name: _host(g.subnet, 2) for g in groups}
        self.congestion_control = congestion_control
        self.emulator: Emulator | None = None
        self._procs: list[subprocess.Popen] = []
        self._created: list[str] = []
        testbed.cleanup_leftovers(self.prefix)
        self._lock_fd = _try_lock(_lock_path(self.prefix, run_id))
        if self._lock_fd is None:
            raise TestbedError(f"run id {run_id!r} is in use")
        try:
            self._build(max_rtt_ms, rate_bits_per_s, server_egress_rate_bits_per_s)
        except BaseException:
            self.close()
            raise

    def _build(self, max_rtt_ms: float, rate: float, egress_rate: int | None) -> None:
        existing = set(_list_netns())
        for ns in (self.client_ns, self.emu_ns, self.server_ns):
            if ns in existing:
                _delete_netns(ns)
            self._created.append(ns)  # before it exists: removed however far the add got
            _add_netns(ns)
        for ns, dev, ens, edev in (
            (self.client_ns, self.client_dev, self.emu_ns, self.emu_client_dev),
            (self.server_ns, self.server_dev, self.emu_ns, self.emu_server_dev),
        ):
            _run(["ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", edev, "netns", ens])
            for n, d in ((ns, dev), (ens, edev)):
                _run(["ip", "netns", "exec", n, "ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off"])
                _run(["ip", "-n", n, "link", "set", d, "up"])
        for g in self.groups:
            plen = g.subnet.split("/")[1]
            _run(
                [
                    "ip",
                    "-n",
                    self.emu_ns,
                    "addr",
                    "add",
                    f"{_host(g.subnet, 1)}/{plen}",
                    "dev",
                    self.emu_client_dev,
                ]
            )
            _run(
                [
                    "ip",
                    "-n",
                    self.client_ns,
                    "addr",
                    "add",
                    f"{_host(g.subnet, 2)}/{plen}",
                    "dev",
                    self.client_dev,
                ]
            )
        _run(["ip", "-n", self.emu_ns, "addr", "add", "10.77.0.2/24", "dev", self.emu_server_dev])
        _run(["ip", "-n", self.server_ns, "addr", "add", f"{self.server_addr}/24", "dev", self.server_dev])
        first = self.groups[0].subnet
        _run(["ip", "-n", self.client_ns, "route", "add", "default", "via", _host(first, 1)])
        _run(["ip", "-n", self.server_ns, "route", "add", "default", "via", "10.77.0.2"])
        setup_emulator_namespace(self.emu_ns, [self.emu_client_dev, self.emu_server_dev], self.tun)
        for ns in (self.client_ns, self.server_ns):
            apply_sysctls(ns, tcp_sysctls(self.congestion_control, max_rtt_ms, rate))
        if egress_rate is not None:
            # The bottleneck: a token bucket on the server's egress (what the
            # testbed's HTB uplink is), so the emulator itself imposes no rate.
            burst = max(15_000, egress_rate // 8 // 250)
            _run(
                ["ip", "netns", "exec", self.server_ns, "tc", "qdisc", "add", "dev", self.server_dev, "root"]
                + ["tbf", "rate", f"{egress_rate}bit", "burst", str(burst), "latency", "100ms"]
            )

    def start_emulator(self, bin_path: Path, workdir: Path, **config) -> Emulator:
        if self.emulator is not None:
            raise TestbedError("an emulator is running already")
        text = netem_config(self.groups, self.tun, **config)
        self.emulator = Emulator.start(bin_path, self.emu_ns, self.tun, text, workdir)
        self._procs.append(self.emulator.proc)
        return self.emulator

    def stop_emulator(self) -> dict:
        if self.emulator is None:
            raise TestbedError("no emulator is running")
        try:
            return self.emulator.stop()
        finally:
            self.emulator = None

    def tun_counters(self) -> dict[str, int]:
        return tun_counters(self.emu_ns, self.tun)

    def popen(self, ns: str, argv: list[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *map(str, argv)], **kw)
        self._procs.append(proc)
        return proc

    def probe(self, ns: str, *args, timeout: float = 120.0) -> dict:
        """Runs ``python -m shortfirst_lab probe ARGS`` in ``ns``; its stdout is one JSON value."""
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "shortfirst_lab", "probe", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0:
            raise TestbedError(f"wanprobe {args[0]} in {ns} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout)

    def probe_popen(self, ns: str, *args, **kw) -> subprocess.Popen:
        """Starts ``python -m shortfirst_lab probe ARGS`` in ``ns`` (stopped at close)."""
        return self.popen(ns, [sys.executable, "-m", "shortfirst_lab", "probe", *map(str, args)], **kw)

    def wait_listening(self, ns: str, port: int, timeout_s: float = 10.0) -> None:
        """Waits until a TCP socket listens on ``port`` in ``ns``."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = _run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"]).stdout
            if out.strip():
                return
            if time.monotonic() > deadline:
                raise TestbedError(f"nothing listens on port {port} in {ns} after {timeout_s} s")
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=testbed.TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        for ns in reversed(self._created):
            _delete_netns(ns)
        self._created.clear()
        if self._lock_fd is not None:
            _lock_path(self.prefix, self.run_id).unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> WanPath:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _host(subnet: str, host: int) -> str:
    """The ``host``-th address of an IPv4 subnet such as 10.78.1.0/24."""
    net = subnet.split("/")[0].split(".")
    return ".".join([*net[:3], str(int(net[3]) + host)])
