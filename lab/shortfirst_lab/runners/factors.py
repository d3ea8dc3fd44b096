"""The environment factors of an experiment as namespace sysctls, command-line flags and the
testbed's keywords (`testbed_args`).

The overload paper (Schroeder & Harchol-Balter 2006) varies ten setups (its Table 2). What
each one becomes here:

- RTT and loss (B, C, D, J): `[wan]` paths or `[[client.groups]]`, `shortfirst netem`
  between the clients and the server;
- requests per connection (E, J): `client.requests_per_connection`, `shortfirst load
  --persistent K`;
- RTO (F): `uplink.initial_rto_ms`, when an unanswered SYN or SYN-ACK is first sent again
  (a BPF sock_ops program on the cgroup of the server and the load generator, synrto.py);
  `uplink.rto_min_ms` (the server route's `rto_min`, established connections' floor),
  `client.syn_retries` and `uplink.synack_retries` (the client and server namespaces'
  `tcp_syn_retries`, `tcp_synack_retries`);
- SYN cookies (G): `uplink.syncookies`, the server namespace's `net.ipv4.tcp_syncookies`;
- user abort and reload (H, J): `client.abort_after_s`, `client.retries`, `shortfirst load
  --abort-after T --retries M`;
- packet length 536 (I): `uplink.mtu = 576` on every veth of the testbed (MSS = MTU - 40);
- SYN and accept queues (all): `uplink.syn_queue` (`tcp_max_syn_backlog`),
  `uplink.accept_queue` (`somaxconn`, which caps the server's listen backlog);
- 350 Apache processes (all): `server.max_connections`, `serve --max-connections`; beyond
  it a connection gets a 503 by default, and with `server.at_max_connections = "wait"`
  (`serve --at-max-connections wait`) it waits in the accept queue as it did in Apache,
  whose overflow is then the paper's SYN drops (overload-persistent-apache.toml).

The initial RTO needs the program: Linux sends a SYN's and a SYN-ACK's first retransmission
after a fixed 1 s (TCP_TIMEOUT_INIT, RFC 6298; the paper's kernel used 3 s), and neither a
sysctl nor a route attribute changes it; `rto_min` bounds the retransmission timer of
established connections only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spec.experiment import SYNCOOKIES, Client, Experiment, Server, Uplink
from ..testbed.bed import tbf_burst_bytes
from ..testbed.placement import Placement


def server_sysctls(u: Uplink) -> dict[str, int]:
    """The server namespace's sysctls beyond the testbed's own (accept queue, congestion
    control): only those the experiment sets."""
    out: dict[str, int] = {}
    if u.syn_queue:
        out["net.ipv4.tcp_max_syn_backlog"] = u.syn_queue
    if u.syncookies:
        out["net.ipv4.tcp_syncookies"] = SYNCOOKIES[u.syncookies]
    if u.synack_retries:
        out["net.ipv4.tcp_synack_retries"] = u.synack_retries
    return out


def client_sysctls(c: Client) -> dict[str, int]:
    """The client namespace's sysctls the experiment sets."""
    return {"net.ipv4.tcp_syn_retries": c.syn_retries} if c.syn_retries else {}


def load_flags(c: Client) -> list[str]:
    """`shortfirst load` flags of the user model: keep-alive, aborts and retries."""
    out: list[str] = []
    if c.requests_per_connection > 1:
        out += ["--persistent", str(c.requests_per_connection)]
    if c.abort_after_s > 0:
        out += ["--abort-after", f"{c.abort_after_s:g}s", "--retries", str(c.retries)]
    return out


def scheduler_flags(scheduler: str, u: Uplink, s: Server) -> list[str]:
    """`shortfirst serve` flags of an arm's scheduler: none for the kernel's bands; a
    user-space scheduler paces to the uplink's rate (times `server.pacer_rate_fraction` when
    set) and, unless `server.pacer_burst` is "none", banks the burst of the token bucket that
    shapes it (see testbed), and crovella
    limits how many responses write at once."""
    if scheduler == "kernel":
        return []
    out = ["--scheduler", scheduler, "--link-rate", str(u.rate_bits_per_s)]
    if s.pacer_burst == "link":
        out += ["--pacer-burst-bytes", str(tbf_burst_bytes(u.mtu, u.rate_bits_per_s))]
    if s.pacer_rate_fraction:
        out += ["--pacer-rate-fraction", f"{s.pacer_rate_fraction:g}"]
    if scheduler == "crovella" and s.write_concurrency:
        out += ["--write-concurrency", str(s.write_concurrency)]
    return out


def serve_flags(s: Server) -> list[str]:
    """`shortfirst serve` flags of the server's limits: the connection limit and what happens
    at it."""
    out = ["--max-connections", str(s.max_connections)] if s.max_connections else []
    if s.at_max_connections:
        out += ["--at-max-connections", s.at_max_connections]
    return out


def testbed_args(
    exp: Experiment,
    binary: Path,
    placement: Placement,
    groups: list | None = None,
    netem_dir: Path | None = None,
    scheduler: str = "kernel",
) -> dict[str, Any]:
    """`testbed.Testbed`'s keywords but the run id: the uplink, the sysctls the experiment
    sets, with ``groups`` (``testbed.GroupPath``) the WAN emulator's (its files in
    ``netem_dir``), a token bucket for a user-space ``scheduler``, the placement's CPUs."""
    u = exp.uplink
    args: dict[str, Any] = {}
    if groups is not None:
        wan = exp.wan
        assert wan is not None, "groups come from the experiment's [wan]"
        args = {
            "groups": groups,
            "netem_dir": netem_dir,
            "netem_seed": wan.seed,
            "netem_jitter_mode": wan.jitter_mode,
            "client_congestion_control": wan.congestion_control,
        }
    # Only what the experiment sets, so a testbed without these knobs still takes the rest.
    if server_sysctls(u):
        args["server_sysctls"] = server_sysctls(u)
    if client_sysctls(exp.client):
        args["client_sysctls"] = client_sysctls(exp.client)
    if scheduler != "kernel":
        args["shaper"] = "tbf"
    return {
        "rate_bits_per_s": u.rate_bits_per_s,
        "data_bands": u.bands,
        "n_clients": 1,  # one generator process; `client.clients` are its client identities
        "shortfirst_bin": binary,
        "mtu": u.mtu,
        "accept_queue": u.accept_queue,
        "queue_packets": u.queue_packets,
        "congestion_control": u.congestion_control or None,
        **args,
        **placement.testbed_args(),
    }
