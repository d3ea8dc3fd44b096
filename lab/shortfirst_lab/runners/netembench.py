"""``make bench-netem``: what ``shortfirst netem`` costs per packet.

For each bottleneck rate (a token bucket on the server's egress, as the
testbed's HTB uplink would be), reno bulk downloads through one emulated group
(RTT 40 ms, no loss) fill the link for ``--seconds``; the emulator's counters
before and after give packets per second through it, its CPU seconds per
packet (user + system, from its own getrusage) and its share of one core,
with release lateness p50/p99/max. Goodput is measured by the receivers.

Writes ``results/bench-netem.json`` (atomically) with provenance. Needs root.
Run under ``flock /run/shortfirst-bench.lock`` (the make target does).
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from ..kit import REPO, provenance, write_json
from ..testbed import bed as testbed
from ..testbed import wan

RTT_MS = 40.0
BULK_PORT = 5002
GROUP = wan.Group("bench", "10.78.1.0/24", RTT_MS)


def measure(bin_path: Path, rate_bits_per_s: int, seconds: float, flows: int, workdir: Path) -> dict:
    with wan.WanPath(testbed.new_run_id(), [GROUP], server_egress_rate_bits_per_s=rate_bits_per_s) as path:
        emu = path.start_emulator(bin_path, workdir / f"{rate_bits_per_s}", seed=1)
        path.probe_popen(path.server_ns, "bulk-server", BULK_PORT, "reno")
        path.wait_listening(path.server_ns, BULK_PORT)
        # Warm up: connections out of slow start before the window opens.
        warm = 2.0
        results: list[dict] = []

        def client() -> None:
            results.append(
                path.probe(
                    path.client_ns,
                    "bulk-client",
                    path.server_addr,
                    BULK_PORT,
                    path.client_addrs["bench"],
                    seconds + warm + 1,
                    warm,
                    timeout=seconds + 60,
                )
            )

        threads = [threading.Thread(target=client) for _ in range(flows)]
        for t in threads:
            t.start()
        time.sleep(warm)
        before = emu.dump()
        time.sleep(seconds)
        after = emu.dump()
        for t in threads:
            t.join()
        final = path.stop_emulator()
        tun = path.tun_counters()
    packets = after["packets_in"] - before["packets_in"]
    elapsed = after["elapsed_s"] - before["elapsed_s"]
    cpu = (after["cpu_user_s"] + after["cpu_system_s"]) - (before["cpu_user_s"] + before["cpu_system_s"])
    down = next(ln for ln in final["lines"] if ln["direction"] == "down")
    return {
        "rate_bits_per_s": rate_bits_per_s,
        "rtt_ms": RTT_MS,
        "flows": flows,
        "window_s": round(elapsed, 3),
        "packets": packets,
        "packets_per_s": round(packets / elapsed, 1),
        "cpu_s": round(cpu, 4),
        "cpu_per_packet_us": round(cpu * 1e6 / packets, 3) if packets else None,
        "cpu_share_of_one_core": round(cpu / elapsed, 4),
        "goodput_bits_per_s": round(sum(r["goodput_bits_per_s"] for r in results), 0),
        "lateness_us_down": down["lateness_us"],
        "dropped": final["totals"]["dropped"],
        "tun_tx_dropped": tun["tx_dropped"],
        "conservation_violations": wan.check_conservation(final),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench netem", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window per rate")
    ap.add_argument("--flows", type=int, default=4)
    ap.add_argument("--rates-mbit", default="10,100")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/shortfirst-bench-netem"))
    args = ap.parse_args(argv)
    rates = [int(float(r) * 1e6) for r in args.rates_mbit.split(",")]
    points = [measure(args.bin.resolve(), r, args.seconds, args.flows, args.workdir) for r in rates]
    for p in points:
        print(
            f"{p['rate_bits_per_s'] / 1e6:.0f} Mbit/s: {p['packets_per_s']:.0f} packets/s, "
            f"{p['cpu_per_packet_us']} us CPU/packet, {100 * p['cpu_share_of_one_core']:.1f}% of a core, "
            f"goodput {p['goodput_bits_per_s'] / 1e6:.1f} Mbit/s, "
            f"lateness p99 {p['lateness_us_down']['p99']} us"
        )
    doc = {
        "benchmark": "netem",
        "method": "reno bulk downloads through one group (RTT 40 ms, no loss); token-bucket bottleneck "
        "on the server egress; emulator counters (getrusage, packets read) over the window after a 2 s "
        "warm-up",
        "points": points,
        "provenance": provenance(REPO, extra={"congestion_control": "reno"}),
    }
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0
