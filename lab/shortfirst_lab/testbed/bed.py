"""Network-namespace testbed: a server behind a shaped uplink, and clients.

Topology (all names carry ``sf`` + a run id, so concurrent runs never collide
and leftovers of a crashed run are found by name)::

    netns sf<id>-srv            netns sf<id>-sw                 netns sf<id>-c<i>
    sf<id>-s  10.77.0.1/24 ==== sf<id>-sp ─┐
    (HTB uplink: `shortfirst     bridge sf<id>-br              sf<id>-c<i> 10.77.0.<10+i>/24
     uplink setup`)                        └─ sf<id>-c<i>p ==== (one per client)

The server's only interface is ``sf<id>-s``; its egress is the uplink, shaped
by ``shortfirst uplink setup`` (HTB, one class per priority band), so every
byte the server sends to any client crosses the one bottleneck, as in the
paper's testbed. With ``shaper="tbf"`` the HTB tree is then replaced by a
plain token bucket at the same rate (no bands, one FIFO: what an operator
without our tree has), for a server that orders its own writes. The clients
hang off a bridge in a switch namespace. TSO, GSO and GRO are off on every
veth end so packets are MTU-sized. The addresses are private and exist only
inside these namespaces: traffic never leaves them. A farm
(:mod:`shortfirst_lab.testbed.farmbed`) extends this testbed: the server namespace becomes
the unshaped front, and C host namespaces on the same bridge each get an uplink of their own.

Links and namespaces are created with ``ip`` (iproute2) rather than pyroute2:
processes must run inside the namespaces anyway (``ip netns exec``, which also
mounts the namespace's own /sys), the veth pair is created directly with both
ends in their namespaces (so nothing ever sits in the root namespace), and the
same commands reproduce any state by hand when debugging.

Crash safety: a run holds an exclusive ``flock`` on
``/run/shortfirst-testbed/sf<id>.lock`` from before its first namespace exists
until after its last is gone. The kernel drops the lock when the process dies,
however it dies, so :func:`cleanup_leftovers` removes exactly the namespaces
whose run is dead and never those of a live concurrent run. The lock, the
commands and that clean-up live in :mod:`shortfirst_lab.testbed.netns`.

WAN mode (``groups`` given): the switch namespace is a router instead of a
bridge, and every packet it forwards goes through ``shortfirst netem`` (a TUN
delay line, :mod:`shortfirst_lab.testbed.wan`), so each client group sees its own RTT,
jitter and loss. There is one client namespace; it holds one address per group
(``10.78.<g+1>.2/24``), and the load generator binds each client's connections
to its group's address (``shortfirst load --source-addrs``)::

    sf<id>-s  10.77.0.1/24 ==== sf<id>-sp 10.77.0.2/24
    (HTB uplink)                 sf<id>-t  (TUN: shortfirst netem)
                                 sf<id>-c0p 10.78.<g+1>.1/24 ==== sf<id>-c0 10.78.<g+1>.2/24

The bottleneck stays the server's HTB uplink; the emulator adds delay and loss
after it. Both ends' TCP is pinned (congestion control, buffers sized for the
largest RTT, no cached metrics) so results do not depend on the host.

Accept queue: ``net.core.somaxconn`` and ``net.ipv4.tcp_max_syn_backlog`` are
set to ``accept_queue`` inside the server namespace (both are per-namespace
sysctls). The kernel caps a socket's listen backlog at ``somaxconn``, so the
server's effective accept queue is ``min(its listen backlog, accept_queue)``:
start the server with a listen backlog of at least ``accept_queue``.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from ..kit import REPO, parse_proc_pairs, process_cpu_s, process_rss_bytes
from .netns import (
    COMMAND_TIMEOUT_S,
    PREFIX,
    TestbedError,
    _add_netns,
    _delete_netns,
    _list_netns,
    _lock_path,
    _run,
    _try_lock,
    cleanup_leftovers,
)
from .placement import checked_cpus

SUBNET_PREFIX = "10.77.0."
SERVER_HOST = 1
CLIENT_HOST_BASE = 10
MAX_CLIENTS = 32
RUN_ID_RE = re.compile(r"^[a-z0-9]{1,6}$")
#: Seconds a process gets between SIGTERM and SIGKILL at teardown.
TERMINATE_GRACE_S = 3.0
#: How the uplink is shaped: ``htb`` (``shortfirst uplink setup``'s band tree) or ``tbf``.
SHAPERS = ("htb", "tbf")
#: The kernel arms' HTB root burst (`uplink::htb::HtbParams`): at least this many full frames,
#: and at least this long at the uplink rate; a frame is the MTU plus the Ethernet header.
HTB_MIN_BURST_FRAMES = 4
HTB_ROOT_BURST_US = 2_000
ETHERNET_HEADER_BYTES = 14


def tbf_burst_bytes(mtu: int, rate_bits_per_s: int) -> int:
    """The token bucket's burst, bytes (frames as the qdisc counts them): the kernel arms' HTB
    root burst, so an idle link lets out as much at line rate under either shaper (6,056 bytes
    at 10 Mbit/s, 25,000 at 100 Mbit/s with a 1,500-byte MTU)."""
    by_time = rate_bits_per_s // 8 * HTB_ROOT_BURST_US // 1_000_000
    return max(HTB_MIN_BURST_FRAMES * (mtu + ETHERNET_HEADER_BYTES), by_time)


_SYSCTL_RE = re.compile(r"net\.[a-z0-9_.]{1,64}")
_CLONE_NEWNET = 0x40000000


class GroupPath(NamedTuple):
    """A client group of a WAN testbed: its name and the path it sees (per round trip)."""

    name: str
    rtt_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0


def new_run_id() -> str:
    """A fresh random run id (6 lowercase hex digits)."""
    return os.urandom(3).hex()


#: Sysctls of the client namespaces. One generator process stands for many clients and opens
#: thousands of connections a second from one address, each closed by the generator and left in
#: TIME_WAIT for 60 s: with the default 28,232 ports the port space fills within half a minute
#: at 100 Mbit/s, every connect() then searches it in the kernel, and that search took the
#: CPU the server shares with the generator (a collapse of 25 s with the server idle). The full
#: port range and TIME_WAIT reuse (safe with TCP timestamps, as for any busy client) keep connect
#: O(1), as it is for the many separate client machines the generator replaces.
CLIENT_SYSCTLS = {"net.ipv4.ip_local_port_range": "1024 65535", "net.ipv4.tcp_tw_reuse": 1}


def _ns_names(prefix: str, run_id: str, n_clients: int) -> tuple[str, str, list[str]]:
    base = f"{prefix}{run_id}"
    return f"{base}-srv", f"{base}-sw", [f"{base}-c{i}" for i in range(n_clients)]


def _resolve_binary(path: str | Path) -> Path:
    p = Path(path)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p, REPO / p]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    tried = ", ".join(map(str, candidates))
    raise TestbedError(f"shortfirst binary {str(path)!r} not found (tried {tried}): make build")


def _check_link_args(
    run_id: str,
    n_clients: int,
    data_bands: int | None,
    mtu: int,
    accept_queue: int,
    queue_packets: int,
    shaper: str,
) -> None:
    """`Testbed`'s run id, namespace count and uplink settings; a bad one raises ValueError."""
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"run_id {run_id!r}: expected 1 to 6 characters of [a-z0-9] (see new_run_id())")
    if not 1 <= n_clients <= MAX_CLIENTS:
        raise ValueError(f"n_clients {n_clients}: expected 1..={MAX_CLIENTS}")
    if data_bands is not None and not 1 <= data_bands <= 7:
        raise ValueError(f"data_bands {data_bands}: expected 1..=7")
    if not 576 <= mtu <= 9000:
        raise ValueError(f"mtu {mtu}: expected 576..=9000")
    if not 1 <= accept_queue <= 65535:
        raise ValueError(f"accept_queue {accept_queue}: expected 1..=65535")
    if not 1 <= queue_packets <= 100_000:
        raise ValueError(f"queue_packets {queue_packets}: expected 1..=100000")
    if shaper not in SHAPERS:
        raise ValueError(f"shaper {shaper!r}: expected one of {', '.join(SHAPERS)}")


def _check_tcp_args(initial_cwnd: int | None, congestion_control: str | None) -> None:
    """`Testbed`'s server TCP settings; a bad one raises ValueError."""
    if initial_cwnd is not None and not 1 <= initial_cwnd <= 100:
        raise ValueError(f"initial_cwnd {initial_cwnd}: expected 1..=100 segments")
    if congestion_control is not None and not re.fullmatch(r"[a-z0-9_]{1,16}", congestion_control):
        raise ValueError(f"congestion_control {congestion_control!r}: expected a name such as reno")


def _check_wan_args(groups: list[GroupPath] | None, n_clients: int, netem_dir: Path | None) -> None:
    """A WAN testbed's groups: 1 to 200 of them, one client namespace, a netem directory."""
    if groups is not None and not 1 <= len(groups) <= 200:
        raise ValueError(f"groups: expected 1..=200, got {len(groups)}")
    if groups is not None and (n_clients != 1 or netem_dir is None):
        raise ValueError("a WAN testbed has one client namespace and needs netem_dir")


def _check_sysctls(what: str, table: dict[str, int] | None) -> None:
    """Extra namespace sysctls: ``net.<name>`` keys with integer values, else ValueError."""
    for key, value in (table or {}).items():
        if not _SYSCTL_RE.fullmatch(key) or isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what}: {key}={value!r}: expected net.<name>=<integer>")


def _check_host() -> None:
    """The testbed needs root and the iproute2 and ethtool commands."""
    if os.geteuid() != 0:
        raise PermissionError("the testbed needs root (network namespaces, tc)")
    for tool in ("ip", "tc", "ethtool"):
        if shutil.which(tool) is None:
            raise TestbedError(f"`{tool}` not found: install iproute2 and ethtool (make apt)")


class Testbed:
    """A server namespace behind a shaped uplink and ``n_clients`` client namespaces.

    The constructor first runs :func:`cleanup_leftovers`, so namespaces left by
    crashed runs never pile up (live runs are never touched).

    ``data_bands`` is the band tree's data bands (default: ``shortfirst uplink setup``'s, the
    bands of ``serve``'s default cutoffs). ``queue_packets`` is each priority band's queue limit on the uplink
    (default: ``shortfirst uplink setup``'s, 10,000 packets). ``shaper`` is ``htb`` (the band
    tree) or ``tbf`` (a token bucket at ``rate_bits_per_s`` whose queue holds ``queue_packets``
    full-size packets, as deep as one band's; :meth:`uplink_stats` then reports it as band 1).
    ``congestion_control`` (e.g. "reno") and ``initial_cwnd`` (segments) set the server
    namespace's TCP; None keeps the kernel's defaults (this machine: bbr, 10 segments). ``server_sysctls`` and
    ``client_sysctls`` (``{"net.ipv4.tcp_syncookies": 0, ...}``) are further per-namespace
    sysctls of the server and of every client namespace, set after the testbed's own (so
    ``net.ipv4.tcp_max_syn_backlog`` there overrides ``accept_queue``'s); the host's are never
    touched.

    Built in the constructor; :meth:`close` (also ``__exit__``) tears everything
    down, always: processes started through the testbed, then the namespaces
    (which removes their veths and the qdisc), then the lock. A failure while
    building tears down what was built before re-raising.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        run_id: str,
        rate_bits_per_s: int,
        data_bands: int | None = None,
        n_clients: int = 1,
        shortfirst_bin: str | Path = "target/release/shortfirst",
        mtu: int = 1500,
        accept_queue: int = 512,
        queue_packets: int = 10_000,
        congestion_control: str | None = None,
        initial_cwnd: int | None = None,
        groups: list[GroupPath] | None = None,
        netem_dir: Path | None = None,
        netem_seed: int = 1,
        netem_jitter_mode: str = "fifo",
        client_congestion_control: str = "reno",
        server_sysctls: dict[str, int] | None = None,
        client_sysctls: dict[str, int] | None = None,
        shaper: str = "htb",
        server_cpus: frozenset[int] | None = None,
        client_cpus: frozenset[int] | None = None,
    ) -> None:
        """Checks every argument before anything is built (a bad one raises ValueError naming it), then
        builds under the run's lock."""
        _check_link_args(run_id, n_clients, data_bands, mtu, accept_queue, queue_packets, shaper)
        _check_tcp_args(initial_cwnd, congestion_control)
        _check_wan_args(groups, n_clients, netem_dir)
        _check_sysctls("server_sysctls", server_sysctls)
        _check_sysctls("client_sysctls", client_sysctls)
        server_cpus = checked_cpus("server_cpus", server_cpus)
        client_cpus = checked_cpus("client_cpus", client_cpus)
        _check_host()
        self.run_id = run_id
        self.rate_bits_per_s = int(rate_bits_per_s)
        self.data_bands = data_bands
        self.n_clients = n_clients
        self.mtu = mtu
        self.accept_queue = accept_queue
        self.queue_packets = queue_packets
        self.shaper = shaper
        self.congestion_control = congestion_control
        self.initial_cwnd = initial_cwnd
        self.shortfirst_bin = _resolve_binary(shortfirst_bin)
        self.groups = list(groups) if groups is not None else None
        self.netem_dir = netem_dir
        self.netem_seed = netem_seed
        self.netem_jitter_mode = netem_jitter_mode
        self.client_congestion_control = client_congestion_control
        self.server_sysctls = dict(server_sysctls or {})
        self.client_sysctls = dict(client_sysctls or {})
        self.emulator = None
        self._admin_pool: ThreadPoolExecutor | None = None
        self._name_links()
        self._procs: list[subprocess.Popen] = []
        # A command prefix for what server_popen / client_popen start, before `ip netns exec`
        # (synrto.InitialRto.prefix: into a cgroup); empty: none.
        self.launch_prefix: list[str] = []
        # CPU placement of what server_popen / client_popen start (None: inherited). On a
        # small machine the generator and the server must not share a CPU at 100 Mbit/s.
        self.server_cpus, self.client_cpus = server_cpus, client_cpus
        self._server_procs: list[subprocess.Popen] = []
        self._anchor: subprocess.Popen | None = None
        self._created_ns: list[str] = []
        self._closed = False
        cleanup_leftovers()
        self._lock_fd = _try_lock(_lock_path(PREFIX, run_id))
        if self._lock_fd is None:
            raise TestbedError(f"run id {run_id!r} is in use by a live testbed")
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _name_links(self) -> None:
        """The run's namespace, interface and TUN names and the addresses (see the module docstring)."""
        run_id, n_clients = self.run_id, self.n_clients
        self.tun = f"{PREFIX}{run_id}-t"
        self.server_ns, self.switch_ns, self.client_ns = _ns_names(PREFIX, run_id, n_clients)
        base = f"{PREFIX}{run_id}"
        self.server_dev = f"{base}-s"
        self.client_devs = [f"{base}-c{i}" for i in range(n_clients)]
        self.server_addr = f"{SUBNET_PREFIX}{SERVER_HOST}"
        self.client_addrs = [f"{SUBNET_PREFIX}{CLIENT_HOST_BASE + i}" for i in range(n_clients)]
        #: Per group name, the client namespace's address of that group (WAN mode).
        self.group_addrs: dict[str, str] = {}
        if self.groups is not None:
            self.group_addrs = {g.name: _group_host(i, 2) for i, g in enumerate(self.groups)}
            self.client_addrs = [self.group_addrs[self.groups[0].name]]

    # -- building -----------------------------------------------------------

    def _build(self) -> None:
        # A dead run with this id may have left namespaces; we hold its lock now.
        existing = set(_list_netns())
        for ns in self._namespaces():
            if ns in existing:
                _delete_netns(ns)
        for ns in self._namespaces():
            self._created_ns.append(ns)  # before it exists: removed however far the add got
            _add_netns(ns)
        if self.groups is not None:
            self._build_wan_links()
        else:
            self._build_bridge()
        self._client_side()
        self._server_side()

    def _namespaces(self) -> list[str]:
        """Every namespace of the run, in the order they are made (and removed in reverse)."""
        return [self.server_ns, self.switch_ns, *self.client_ns]

    def _bridge_members(self) -> list[tuple[str, str, str]]:
        """(namespace, interface, address) of everything on the LAN bridge: server, clients."""
        return [(self.server_ns, self.server_dev, self.server_addr)] + list(
            zip(self.client_ns, self.client_devs, self.client_addrs, strict=True)
        )

    def _client_side(self) -> None:
        """Every client namespace gets CLIENT_SYSCTLS (see there), then the experiment's own."""
        for ns in self.client_ns:
            for key, value in {**CLIENT_SYSCTLS, **self.client_sysctls}.items():
                _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"])

    def _build_bridge(self, members: list[tuple[str, str, str]] | None = None) -> str:
        """``members`` (the server and the clients by default) on one bridge in the switch
        namespace, a LAN; returns the bridge's name."""
        sw, br = self.switch_ns, f"{PREFIX}{self.run_id}-br"
        _run(["ip", "-n", sw, "link", "add", br, "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", br, "up"])
        for ns, dev, addr in self._bridge_members() if members is None else members:
            peer = self._veth(ns, dev)
            _run(["ip", "-n", sw, "link", "set", peer, "master", br])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
        return br

    def _veth(self, ns: str, dev: str) -> str:
        """A veth from ``dev`` in ``ns`` to ``<dev>p`` in the switch namespace, MTU set,
        offloads off (so the emulator and the uplink see wire-size packets), both up."""
        peer = f"{dev}p"
        _run(
            [
                "ip",
                "link",
                "add",
                dev,
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                peer,
                "netns",
                self.switch_ns,
            ]
        )
        for n, d in ((ns, dev), (self.switch_ns, peer)):
            _run(["ip", "-n", n, "link", "set", d, "mtu", str(self.mtu)])
            _run(["ip", "netns", "exec", n, "ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off"])
            _run(["ip", "-n", n, "link", "set", d, "up"])
        return peer

    def _build_wan_links(self) -> None:
        """The switch namespace routes between the server's /24 and one /24 per client
        group, through ``shortfirst netem``; see the module docstring."""
        from . import wan

        assert self.groups is not None and self.netem_dir is not None
        sw, client_ns = self.switch_ns, self.client_ns[0]
        server_peer = self._wan_server_link()
        client_peer = self._veth(client_ns, self.client_devs[0])
        _run(["ip", "-n", sw, "addr", "add", f"{SUBNET_PREFIX}2/24", "dev", server_peer])
        _run(["ip", "-n", self.server_ns, "route", "add", "default", "via", f"{SUBNET_PREFIX}2"])
        for i in range(len(self.groups)):
            _run(["ip", "-n", sw, "addr", "add", f"{_group_host(i, 1)}/24", "dev", client_peer])
            _run(
                ["ip", "-n", client_ns, "addr", "add", f"{_group_host(i, 2)}/24", "dev", self.client_devs[0]]
            )
        _run(["ip", "-n", client_ns, "route", "add", "default", "via", _group_host(0, 1)])
        wan.setup_emulator_namespace(sw, [client_peer, server_peer], self.tun)
        max_rtt_ms = max(g.rtt_ms + 2 * g.jitter_ms for g in self.groups)
        wan.apply_sysctls(
            client_ns, wan.tcp_sysctls(self.client_congestion_control, max_rtt_ms, self.rate_bits_per_s)
        )
        # The server's congestion control is the experiment's (set below); only its buffers here.
        wan.apply_sysctls(self.server_ns, wan.tcp_sysctls(None, max_rtt_ms, self.rate_bits_per_s))
        groups = [
            wan.Group(
                name=g.name, subnet=_group_subnet(i), rtt_ms=g.rtt_ms, jitter_ms=g.jitter_ms, loss=g.loss
            )
            for i, g in enumerate(self.groups)
        ]
        text = wan.netem_config(groups, self.tun, seed=self.netem_seed, jitter_mode=self.netem_jitter_mode)
        self.emulator = wan.Emulator.start(self.shortfirst_bin, sw, self.tun, text, self.netem_dir)
        self._procs.append(self.emulator.proc)

    def _wan_server_link(self) -> str:
        """WAN mode: the server's veth, addressed; returns its end in the switch namespace
        (the router's side of the server's /24)."""
        peer = self._veth(self.server_ns, self.server_dev)
        _run(["ip", "-n", self.server_ns, "addr", "add", f"{self.server_addr}/24", "dev", self.server_dev])
        return peer

    def stop_emulator(self) -> dict:
        """Stops ``shortfirst netem`` and returns its final counters plus the TUN's
        (``{"netem": {...}, "tun": {...}, "conservation_violations": [...]}``)."""
        from . import wan

        if self.emulator is None:
            raise TestbedError("no emulator is running (not a WAN testbed, or stopped already)")
        emu, self.emulator = self.emulator, None
        tun = wan.tun_counters(self.switch_ns, self.tun)
        stats = emu.stop()
        return {"netem": stats, "tun": tun, "conservation_violations": wan.check_conservation(stats)}

    def _server_side(self) -> None:
        self._server_tcp(self.server_ns)
        self._shape_uplink(self.server_ns, self.server_dev)
        if self.initial_cwnd and self.groups is not None:
            self._wan_initcwnd(self.server_ns, self.server_dev)
        elif self.initial_cwnd:
            self._lan_initcwnd(self.server_ns, self.server_dev, self.server_addr)
        self._park_anchor()

    def _wan_initcwnd(self, ns: str, dev: str) -> None:
        """``initial_cwnd`` on the default route of ``dev`` in ``ns``: the clients are behind
        the router (WAN mode)."""
        route = ["default", "via", f"{SUBNET_PREFIX}2", "dev", dev]
        _run(["ip", "-n", ns, "route", "change", *route, "initcwnd", str(self.initial_cwnd)])

    def _lan_initcwnd(self, ns: str, dev: str, addr: str) -> None:
        """``initial_cwnd`` on the LAN route of ``dev`` (address ``addr``) in ``ns``."""
        route = [f"{SUBNET_PREFIX}0/24", "dev", dev, "proto", "kernel", "scope", "link", "src", addr]
        _run(["ip", "-n", ns, "route", "change", *route, "initcwnd", str(self.initial_cwnd)])

    def _park_anchor(self) -> None:
        """A process parked in the server namespace: /proc/<pid>/net/* then shows that
        namespace's sockets and counters without a fork per sample. Then the links' check."""
        self._anchor = subprocess.Popen(
            ["ip", "netns", "exec", self.server_ns, "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._procs.append(self._anchor)
        self._wait_reachable()

    def _server_tcp(self, ns: str) -> None:
        """A serving namespace's TCP: its accept queue, congestion control, then the
        experiment's own sysctls."""
        sysctls = {"net.core.somaxconn": self.accept_queue, "net.ipv4.tcp_max_syn_backlog": self.accept_queue}
        if self.congestion_control:
            sysctls["net.ipv4.tcp_congestion_control"] = self.congestion_control
        sysctls.update(self.server_sysctls)
        for key, value in sysctls.items():
            _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"])

    def _shape_uplink(self, ns: str, dev: str) -> None:
        """``dev``'s egress in ``ns`` shaped to the uplink: the HTB band tree (``shortfirst
        uplink setup``), then under ``shaper="tbf"`` a token bucket in its place."""
        _run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                str(self.shortfirst_bin),
                "uplink",
                "setup",
                "--dev",
                dev,
                "--link-rate",
                str(self.rate_bits_per_s),
                *(["--bands", str(self.data_bands)] if self.data_bands is not None else []),
                "--queue-packets",
                str(self.queue_packets),
                "--offloads",
                "off",
            ]
        )
        if self.shaper == "tbf":  # after the tree's set-up, which also leaves packets MTU-sized
            self._shape_with_tbf(ns, dev)

    def _shape_with_tbf(self, ns: str, dev: str) -> None:
        """Replaces the HTB tree by a token bucket at the same rate: a bucket as deep as the HTB
        root's burst, a queue as deep as one band's (the pacer above keeps it empty; never the
        one that drops)."""
        burst = tbf_burst_bytes(self.mtu, self.rate_bits_per_s)
        limit = self.queue_packets * self.mtu
        argv = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf"]
        argv += ["rate", str(self.rate_bits_per_s), "burst", str(burst), "limit", str(limit)]
        _run(["ip", "netns", "exec", ns, *argv])

    def _wait_reachable(self, timeout_s: float = 10.0) -> None:
        """Waits until the links are up (the bridge forwards, ARP resolves):
        a TCP connect from each client to a closed server port gets refused."""
        deadline = time.monotonic() + timeout_s
        probe = (
            "import socket,sys\n"
            "s=socket.socket();s.settimeout(1)\n"
            "try:\n s.connect((sys.argv[1],9))\n"
            "except ConnectionRefusedError:\n sys.exit(0)\n"
            "except OSError:\n sys.exit(1)\n"
        )
        for i in range(self.n_clients):
            while True:
                argv = [sys.executable, "-c", probe, self.server_addr]
                if self.client_run(argv, client=i, timeout=5).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise TestbedError(f"client {i} cannot reach {self.server_addr} after {timeout_s} s")
                time.sleep(0.1)

    # -- running processes --------------------------------------------------

    def _popen(self, ns: str, argv: list[str], cpus: frozenset[int] | None = None, **kw) -> subprocess.Popen:
        if self._closed:
            raise TestbedError("testbed is closed")
        if cpus is not None:
            kw["preexec_fn"] = lambda: os.sched_setaffinity(0, cpus)
        proc = subprocess.Popen([*self.launch_prefix, "ip", "netns", "exec", ns, *map(str, argv)], **kw)
        self._procs.append(proc)
        return proc

    def server_popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """Starts ``argv`` inside the server namespace; stopped at teardown if still running."""
        proc = self._popen(self.server_ns, argv, self.server_cpus, **kw)
        self._server_procs.append(proc)
        return proc

    def client_popen(self, argv: list[str], client: int = 0, **kw) -> subprocess.Popen:
        """Starts ``argv`` inside client namespace ``client``."""
        return self._popen(self.client_ns[client], argv, self.client_cpus, **kw)

    def server_run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Runs ``argv`` to completion in the server namespace (``subprocess.run`` keywords)."""
        return self._ns_run(self.server_ns, argv, **kw)

    @staticmethod
    def _ns_run(ns: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", ns, *map(str, argv)], **kw)

    def client_run(self, argv: list[str], client: int = 0, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.client_ns[client], *map(str, argv)], **kw)

    # -- observing ----------------------------------------------------------

    def uplink_stats(self) -> dict:
        """``shortfirst uplink show --json`` for the server's uplink:
        ``{"dev", "rate_bits_per_s", "bands": [{"band", "class", "so_priority",
        "bytes", "packets", "drops", "overlimits", "requeues", "backlog_bytes",
        "backlog_packets"}], "total": {...}}``; a token bucket's counters as band 1 (class
        ``tbf``, so_priority None)."""
        return self._uplink_stats(self.server_ns, self.server_dev)

    def _uplink_stats(self, ns: str, dev: str) -> dict:
        """`uplink_stats` of ``dev`` in ``ns``."""
        if self.shaper == "tbf":
            return self._tbf_stats(ns, dev)
        out = self._ns_run(
            ns,
            [self.shortfirst_bin, "uplink", "show", "--dev", dev, "--json"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if out.returncode != 0:
            raise TestbedError(f"uplink show failed: {out.stderr.strip()}")
        return json.loads(out.stdout)

    def _tbf_stats(self, ns: str, dev: str) -> dict:
        """The token bucket's counters as one band. ``tc -n`` enters the namespace itself: about
        half of ``ip netns exec``'s CPU (no mount namespace, no /sys remount), which a 1 Hz
        sample of every host's uplink pays on the server CPUs."""
        out = subprocess.run(
            ["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if out.returncode != 0:
            raise TestbedError(f"tc qdisc show failed: {out.stderr.strip()}")
        q = next((q for q in json.loads(out.stdout) if q.get("kind") == "tbf"), None)
        if q is None:
            raise TestbedError(f"no tbf qdisc on {dev}: {out.stdout.strip()[:300]}")
        counters = {k: q.get(k, 0) for k in ("bytes", "packets", "drops", "overlimits", "requeues")}
        counters.update(backlog_bytes=q.get("backlog", 0), backlog_packets=q.get("qlen", 0))
        band = {"band": 1, "class": "tbf", "so_priority": None, **counters}
        return {
            "dev": dev,
            "rate_bits_per_s": self.rate_bits_per_s,
            "bands": [band],
            "total": counters,
        }

    def health_sample(self) -> dict:
        """One sample of server health, for sampling once a second:

        - ``time_s``: ``time.monotonic()`` when taken;
        - ``open_connections``: server-namespace TCP sockets that are neither
          listening nor closed/TIME_WAIT (includes ``syn_recv``);
        - ``syn_recv``: half-open connections (SYN received, handshake pending);
        - ``listen_overflows``, ``listen_drops``: ``TcpExt: ListenOverflows`` and
          ``ListenDrops`` from the namespace's ``/proc/net/netstat`` (cumulative);
        - ``band_bytes``, ``band_backlog_packets``, ``band_drops``: per band
          (``{band: value}``), from the HTB counters (bytes and drops cumulative);
        - ``server_cpu_s``: user+system CPU seconds of the processes started
          with :meth:`server_popen` that are still alive; ``server_rss_bytes``: their
          resident memory;
        - ``accept_queue``: connections waiting in listening sockets' accept queues now;
        - ``syncookies_sent``, ``reqq_full_drops``: ``TcpExt: SyncookiesSent`` and
          ``TCPReqQFullDrop`` (cumulative: SYNs answered with a cookie, SYNs dropped because
          the SYN queue was full).
        """
        return self._health_from(self.uplink_stats())

    def _health_from(self, uplink: dict) -> dict:
        """`health_sample` with the uplink's counters as `uplink_stats` returned them."""
        if self._anchor is None or self._anchor.poll() is not None:
            raise TestbedError("the server-namespace anchor process is gone")
        net = Path(f"/proc/{self._anchor.pid}/net")
        states, accept_queue = _tcp_states([net / "tcp", net / "tcp6"])
        netstat = parse_proc_pairs((net / "netstat").read_text())
        tcpext = netstat.get("TcpExt", {})
        alive = [p for p in self._server_procs if p.poll() is None]
        return {
            "time_s": time.monotonic(),
            "open_connections": sum(n for st, n in states.items() if st not in _NOT_OPEN_STATES),
            "syn_recv": states.get(_TCP_SYN_RECV, 0),
            "listen_overflows": netstat.get("TcpExt", {}).get("ListenOverflows", 0),
            "listen_drops": netstat.get("TcpExt", {}).get("ListenDrops", 0),
            "band_bytes": {b["band"]: b["bytes"] for b in uplink["bands"]},
            "band_backlog_packets": {b["band"]: b["backlog_packets"] for b in uplink["bands"]},
            "band_drops": {b["band"]: b["drops"] for b in uplink["bands"]},
            "server_cpu_s": sum(process_cpu_s(p.pid) for p in alive),
            "server_rss_bytes": sum(process_rss_bytes(p.pid) for p in alive),
            "accept_queue": accept_queue,
            "syncookies_sent": tcpext.get("SyncookiesSent", 0),
            "reqq_full_drops": tcpext.get("TCPReqQFullDrop", 0),
        }

    def admin_check(self, port: int, path: str = "/metrics", timeout_s: float = 2.0) -> dict:
        """Whether the server's admin endpoint answers now: an HTTP GET of ``path`` on
        ``server_addr:port`` from inside the server namespace. Returns ``{"admin_ok": 1|0,
        "admin_latency_s": seconds or NaN}`` (ok: a 200 within ``timeout_s``).

        The request is made by one worker thread that has joined the server's network
        namespace (``setns`` applies to the calling thread only), so a check costs a
        connection, not a process, and the sampling thread stays where it was.
        """
        if self._admin_pool is None:
            if self._anchor is None:
                raise TestbedError("the server-namespace anchor process is gone")
            self._admin_pool = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="admin-check",
                initializer=_join_netns,
                initargs=(self._anchor.pid,),
            )
        return self._admin_pool.submit(_http_ok, self.server_addr, port, path, timeout_s).result()

    # -- teardown -----------------------------------------------------------

    def close(self) -> None:
        """Tears everything down; safe to call twice. Errors in one step do not
        stop the next; the first is raised at the end."""
        if self._closed:
            return
        self._closed = True
        first_error: BaseException | None = None
        if self._admin_pool is not None:
            self._admin_pool.shutdown(wait=True, cancel_futures=True)
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + TERMINATE_GRACE_S
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for ns in reversed(self._created_ns):
            try:
                _delete_netns(ns)
            except BaseException as e:  # keep going: the other namespaces must go too
                first_error = first_error or e
        if self._lock_fd is not None:
            if first_error is None:
                _lock_path(PREFIX, self.run_id).unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        if first_error is not None:
            raise first_error

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _group_subnet(index: int) -> str:
    """Client group ``index``'s /24 in WAN mode (``10.78.<index+1>.0/24``)."""
    return f"10.78.{index + 1}.0/24"


def _group_host(index: int, host: int) -> str:
    return f"10.78.{index + 1}.{host}"


_TCP_SYN_RECV = 0x03
_TCP_TIME_WAIT = 0x06
_TCP_CLOSE = 0x07
_TCP_LISTEN = 0x0A
_NOT_OPEN_STATES = {_TCP_TIME_WAIT, _TCP_CLOSE, _TCP_LISTEN}


def _tcp_states(paths: list[Path]) -> tuple[dict[int, int], int]:
    """Counts sockets per TCP state (the hex ``st`` column of /proc/net/tcp*), and the
    connections waiting in listening sockets' accept queues (their ``rx_queue``)."""
    counts: dict[int, int] = {}
    accept_queue = 0
    for path in paths:
        try:
            lines = path.read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 4:
                st = int(fields[3], 16)
                counts[st] = counts.get(st, 0) + 1
                if st == _TCP_LISTEN:
                    accept_queue += int(fields[4].split(":")[1], 16)
    return counts, accept_queue


def _join_netns(pid: int) -> None:
    """Moves the calling thread into the network namespace of process ``pid``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into the network namespace of {pid}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _http_ok(host: str, port: int, path: str, timeout_s: float) -> dict:
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read(1 << 20)  # a metrics page is small; a larger one is still an answer
        ok = resp.status == 200
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        conn.close()
    return {"admin_ok": int(ok), "admin_latency_s": time.monotonic() - t0 if ok else math.nan}
