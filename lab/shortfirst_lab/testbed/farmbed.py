"""A farm testbed: C hosts, each a server namespace behind its own shaped uplink, a front
namespace for the dispatcher (HAProxy), and the clients, built on
:mod:`shortfirst_lab.testbed.bed`, which builds, runs and tears down everything here. On a LAN
all of them share the bridge::

    netns sf<id>-srv   sf<id>-s    10.77.0.1/24       the front: the dispatcher, link not shaped
    netns sf<id>-h<i>  sf<id>-h<i> 10.77.0.<64+i>/24  host i: its egress is its uplink (the HTB
                                                      band tree, or a token bucket: ``shaper``)
    netns sf<id>-c<j>  sf<id>-c<j> 10.77.0.<10+j>/24  clients, as in a single-server testbed

With client ``groups`` (WAN mode) the front and the hosts share the bridge, and the switch
namespace, holding 10.77.0.2 on it, routes between that /24 and the groups' /24s (one client
namespace, one address per group) through ``shortfirst netem``, as a single-server WAN testbed
does; what the hosts and the front say to each other is bridged and never crosses the
emulator::

    front, hosts ==== bridge sf<id>-br 10.77.0.2/24 (sf<id>-sw) ── sf<id>-t (TUN: shortfirst netem)
                                                               ── sf<id>-c0p ==== sf<id>-c0

Every host's responses cross its own uplink on their way to the front, which relays them to
the clients over an unshaped link (and, in WAN mode, the group's path): C bottlenecks of
``rate_bits_per_s`` each, as a farm of servers with their own uplinks has. The front is the
testbed's server namespace (its ``server_ns``, ``server_addr``: where clients connect, where
`health_sample` looks, whose TCP buffers are sized for the groups' largest RTT and whose
default route carries ``initial_cwnd``); the processes of the front and of every host count as
server processes (CPU, memory, teardown).
"""

from __future__ import annotations

import subprocess

from ..kit import FARM_MAX_HOSTS
from .bed import SERVER_HOST, SUBNET_PREFIX, Testbed
from .netns import PREFIX

#: Hosts' addresses start here (clients take 10..41).
HOST_ADDR_BASE = 64


def front_addr() -> str:
    """The front's address (the testbed's server address): where clients connect."""
    return f"{SUBNET_PREFIX}{SERVER_HOST}"


def host_addrs(n_hosts: int) -> list[str]:
    """The hosts' addresses, the same in every farm testbed of ``n_hosts``."""
    return [f"{SUBNET_PREFIX}{HOST_ADDR_BASE + i}" for i in range(n_hosts)]


class FarmTestbed(Testbed):
    """A `Testbed` whose server namespace is the front and which has ``n_hosts`` hosts, each
    shaped as a single-server testbed's server is (``shaper``, ``data_bands``, ``queue_packets``,
    ``congestion_control``, ``initial_cwnd``, ``server_sysctls`` apply to every host; the
    accept queue and the sysctls also to the front); with ``groups``, the clients reach the
    front through the WAN emulator (see the module docstring)."""

    __test__ = False  # not a pytest test class

    def __init__(self, run_id: str, rate_bits_per_s: int, n_hosts: int, **kw) -> None:
        if not 2 <= n_hosts <= FARM_MAX_HOSTS:
            raise ValueError(f"n_hosts {n_hosts}: expected 2..={FARM_MAX_HOSTS}")
        self.n_hosts = n_hosts
        super().__init__(run_id, rate_bits_per_s, **kw)

    def _name_links(self) -> None:
        super()._name_links()
        base = f"{PREFIX}{self.run_id}"
        self.host_ns = [f"{base}-h{i}" for i in range(self.n_hosts)]
        self.host_devs = list(self.host_ns)  # each host's one interface, named as its namespace
        self.host_addrs = host_addrs(self.n_hosts)

    def _namespaces(self) -> list[str]:
        return [*super()._namespaces(), *self.host_ns]

    def _host_members(self) -> list[tuple[str, str, str]]:
        return list(zip(self.host_ns, self.host_devs, self.host_addrs, strict=True))

    def _bridge_members(self) -> list[tuple[str, str, str]]:
        return [*super()._bridge_members(), *self._host_members()]

    def _wan_server_link(self) -> str:
        """WAN mode: the front and the hosts on the bridge; the bridge is the router's side."""
        front = (self.server_ns, self.server_dev, self.server_addr)
        return self._build_bridge([front, *self._host_members()])

    def _server_side(self) -> None:
        """The front's TCP (unshaped; in WAN mode its default route's initial window), then
        every host's TCP and uplink, then the anchor."""
        self._server_tcp(self.server_ns)
        if self.initial_cwnd and self.groups is not None:
            self._wan_initcwnd(self.server_ns, self.server_dev)
        for ns, dev, addr in zip(self.host_ns, self.host_devs, self.host_addrs, strict=True):
            self._server_tcp(ns)
            self._shape_uplink(ns, dev)
            if self.initial_cwnd:
                self._lan_initcwnd(ns, dev, addr)
        self._park_anchor()

    # -- running and observing hosts ------------------------------------------

    def host_popen(self, host: int, argv: list[str], **kw) -> subprocess.Popen:
        """Starts ``argv`` inside host ``host``'s namespace, on the server CPUs; stopped at
        teardown if still running."""
        proc = self._popen(self.host_ns[host], argv, self.server_cpus, **kw)
        self._server_procs.append(proc)
        return proc

    def host_run(self, host: int, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Runs ``argv`` to completion in host ``host``'s namespace (``subprocess.run`` keywords)."""
        return self._ns_run(self.host_ns[host], argv, **kw)

    def host_uplink_stats(self, host: int) -> dict:
        """`Testbed.uplink_stats` of host ``host``'s uplink."""
        return self._uplink_stats(self.host_ns[host], self.host_devs[host])

    def health_sample(self) -> dict:
        """`Testbed.health_sample` (the front's sockets, the hosts' bands summed), plus each
        host's uplink from the same reading: ``host_bytes`` sent (cumulative) and
        ``host_backlog_packets`` queued now, ``{host: value}``."""
        uplink = self.uplink_stats()
        sample = self._health_from(uplink)
        hosts = uplink["hosts"]
        sample["host_bytes"] = {i: h["total"].get("bytes", 0) for i, h in enumerate(hosts)}
        sample["host_backlog_packets"] = {
            i: sum(b.get("backlog_packets", 0) for b in h["bands"]) for i, h in enumerate(hosts)
        }
        return sample

    def uplink_stats(self) -> dict:
        """Every host's uplink counters summed band by band (``dev`` "hosts", the rate C × the
        rate), each host's under ``hosts``: the farm's uplink as `health_sample` reads it."""
        hosts = [self.host_uplink_stats(i) for i in range(self.n_hosts)]
        bands: dict[int, dict] = {}
        for h in hosts:
            for b in h["bands"]:
                if b["band"] not in bands:
                    bands[b["band"]] = {**b}
                    continue
                into = bands[b["band"]]
                for k, v in b.items():
                    if k not in ("band", "class", "so_priority") and isinstance(v, int):
                        into[k] += v
        total = {k: sum(h["total"].get(k, 0) for h in hosts) for k in hosts[0]["total"]}
        return {
            "dev": "hosts",
            "rate_bits_per_s": self.rate_bits_per_s * self.n_hosts,
            "bands": [bands[k] for k in sorted(bands)],
            "total": total,
            "hosts": hosts,
        }
