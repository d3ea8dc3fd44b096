"""The two-sizes download experiment: one short response requested while
several long ones download through the shaped uplink, under each policy.

This is the smallest experiment that shows the paper's effect (Harchol-Balter
et al. 2003, §2): under ``fair`` the short response shares the uplink with
every long one; under ``srpt`` its packets sit in a better HTB band and go
first. It backs the namespace test (tests/test_namespace_srpt.py) and ``make demo-downloads``:

    python -m shortfirst_lab downloads [--bin target/release/shortfirst] [--trials 3] [--out FILE.json]
        [--scheduler kernel|user]

With ``--scheduler user`` the server orders its own writes (``serve --scheduler
user``) and the uplink is shaped by a plain token bucket (``tc … tbf``, no HTB,
no bands): the same effect with no kernel priority at all.

Each trial starts a fresh ``shortfirst serve`` in the server namespace, starts
the long downloads from the client namespace, waits until they are under way,
then times the short fetch from the client side (connect to last byte). The
HTB counters are read before and after, so each trial reports the bytes each
band carried during it. Policies alternate trial by trial, so machine noise
falls on both alike; the summary takes the median per policy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..kit import shortfirst_binary
from ..spec import vocabulary
from ..testbed.bed import Testbed, TestbedError, cleanup_leftovers, new_run_id

RATE_BITS_PER_S = 10_000_000
N_LARGE = 8
LARGE_BYTES = 1_000_000
SMALL_BYTES = 20_000
PORT = 8080
#: Seconds after starting the long downloads at which the short response is
#: requested, once each (one after the other, never overlapping): from when
#: all long ones are sending to well before the ~6.5 s they need together at
#: 10 Mbit/s. Several samples per trial make the median robust without
#: making the run longer.
SMALL_FETCH_AT_S = (1.5, 2.5, 3.5, 4.5)
#: Seconds any one trial may take before it is abandoned as failed.
TRIAL_TIMEOUT_S = 60.0
#: SO_SNDBUF for the server's client sockets; 0 (the default) leaves the
#: server's own setting. A socket's priority applies to a packet when TCP
#: transmits it, while the server changes band as its *written* bytes cross a
#: cutoff; the server keeps the two close with TCP_NOTSENT_LOWAT (16 KiB by
#: default). Before it did, the kernel-autotuned send buffer let long
#: responses be promoted well before they were sent (measured: 2.8x instead of
#: 4.0x), and a 32 KB bound here fixed it; with the server's default now:
#: 3.7x (fair 0.078 s, srpt 0.021 s). Kept as a knob to study that effect.
SEND_BUFFER_BYTES = 0
#: TCP congestion control in the server namespace. Reno, the paper's (Linux
#: 2.2) kind of TCP, is the loss-based one a namespace may choose here (cubic
#: is not in this kernel's tcp_allowed_congestion_control). Measured with
#: BBR, this machine's default, the ratio is 2.5x (fair 0.061 s, srpt
#: 0.024 s): BBR paces its flows and keeps the FIFO short, so under FAIR a
#: new connection's 10-segment initial window lands near the head of the
#: queue. With reno the FIFO holds the long flows' bursts: 4.0x (0.081 s vs
#: 0.020 s). "" keeps the namespace's default.
CONGESTION_CONTROL = "reno"
#: The paper's cutoffs, so a 1 MB response stays in the last band (6) until its final 50 KB
#: and the bands below it carry the short response alone while it runs (what the test of
#: this runner checks, band by band). Under `serve`'s default a long response's last 256 KB
#: would share band 5 with pages' resources.
CUTOFFS = "1K,2K,5K,20K,50K"


@dataclass
class Trial:
    policy: str
    #: Each short fetch's time, connect to last byte, seconds.
    small_s: list[float]
    large_s: list[float]
    #: Bytes each band's HTB class sent during the trial, {band: bytes}. Under
    #: a plain TBF (user-space scheduling) there are no bands: key 1 holds the
    #: TBF's totals.
    band_bytes: dict[int, int]
    band_packets: dict[int, int]
    #: Packets each band's queue dropped (full) during the trial.
    band_drops: dict[int, int]
    #: Per short fetch: bytes per band from just before it to just after it.
    small_window_band_bytes: list[dict[int, int]]
    #: All long downloads were still running when the last short one finished.
    overlapped: bool


@dataclass
class Result:
    rate_bits_per_s: int
    n_large: int
    large_bytes: int
    small_bytes: int
    server_args: list[str]
    #: The server namespace's TCP congestion control ("" = its default).
    congestion_control: str
    #: Who ordered the uplink (`serve --scheduler`).
    scheduler: str = "kernel"
    trials: list[Trial] = field(default_factory=list)

    def median_small_s(self, policy: str) -> float:
        return statistics.median(s for t in self.trials if t.policy == policy for s in t.small_s)

    def ratio(self) -> float:
        """Median short-response time under fair ÷ under srpt."""
        return self.median_small_s("fair") / self.median_small_s("srpt")

    def band_totals(self, policy: str) -> dict[int, int]:
        totals: dict[int, int] = {}
        for t in self.trials:
            if t.policy == policy:
                for band, n in t.band_bytes.items():
                    totals[band] = totals.get(band, 0) + n
        return totals


def make_files(root: Path, seed: int = 1) -> None:
    """``large-<i>.bin`` (1 MB each) and ``small.bin`` (20 KB), seeded random bytes
    (incompressible, so no layer can shortcut them)."""
    rng = random.Random(seed)
    for i in range(N_LARGE):
        (root / f"large-{i}.bin").write_bytes(rng.randbytes(LARGE_BYTES))
    (root / "small.bin").write_bytes(rng.randbytes(SMALL_BYTES))


def _probe(*args: str) -> list[str]:
    return [sys.executable, "-m", "shortfirst_lab", "probe", *args]


def _band_counters(bed: Testbed) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """(bytes, packets, drops) per band, cumulative; a TBF's totals as band 1."""
    bands = bed.uplink_stats()["bands"]
    return tuple({b["band"]: b[key] for b in bands} for key in ("bytes", "packets", "drops"))


def _wait_for_server(bed: Testbed, server: subprocess.Popen, url: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise TestbedError(f"shortfirst serve exited with {server.returncode} before it answered {url}")
        out = bed.client_run(_probe("fetch", url), capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and json.loads(out.stdout.splitlines()[0])["status"] == 200:
            return
        time.sleep(0.2)
    raise TestbedError(f"shortfirst serve did not answer {url} within {timeout_s} s")


def run_trial(
    bed: Testbed,
    root: Path,
    policy: str,
    log_dir: Path | None = None,
    server_args: tuple[str, ...] = (),
) -> Trial:
    """One trial: a fresh server under ``policy``, the long downloads, the timed short ones."""
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_dir / f"serve-{policy}.log", "a")) if log_dir else None
        small_outs, large_out, overlapped, counters = _trial(bed, root, policy, log, server_args)
    before, windows, after = counters
    small_results = [json.loads(out.splitlines()[0]) for out in small_outs]
    large_results = [json.loads(line) for line in large_out.splitlines()]
    for r in [*small_results, *large_results]:
        want = SMALL_BYTES if r["url"].endswith("small.bin") else LARGE_BYTES
        if r["status"] != 200 or r["bytes"] != want:
            raise TestbedError(f"{policy}: fetch of {r['url']} returned {r}")
    return Trial(
        policy=policy,
        small_s=[r["seconds"] for r in small_results],
        large_s=[r["seconds"] for r in large_results],
        band_bytes={b: after[0][b] - before[0].get(b, 0) for b in after[0]},
        band_packets={b: after[1][b] - before[1].get(b, 0) for b in after[1]},
        band_drops={b: after[2][b] - before[2].get(b, 0) for b in after[2]},
        small_window_band_bytes=[{b: a[0][b] - w[0].get(b, 0) for b in a[0]} for w, a in windows],
        overlapped=overlapped,
    )


def _trial(bed: Testbed, root: Path, policy: str, log, server_args: tuple[str, ...]) -> tuple:
    base = f"http://{bed.server_addr}:{PORT}"
    server = bed.server_popen(
        [bed.shortfirst_bin, "serve", "--root", root, "--policy", policy]
        + (["--cutoffs", CUTOFFS] if policy == "srpt" else [])
        + ["--listen", f"{bed.server_addr}:{PORT}", *server_args],
        stdin=subprocess.DEVNULL,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
    )
    try:
        _wait_for_server(bed, server, f"{base}/small.bin")
        before = _band_counters(bed)
        large = bed.client_popen(
            _probe("fetch", *[f"{base}/large-{i}.bin" for i in range(N_LARGE)]),
            stdout=subprocess.PIPE,
            text=True,
        )
        started = time.monotonic()
        small_outs, windows = [], []
        for at_s in SMALL_FETCH_AT_S:
            time.sleep(max(0.0, started + at_s - time.monotonic()))
            window_before = _band_counters(bed)
            small = bed.client_run(
                _probe("fetch", f"{base}/small.bin"),
                capture_output=True,
                text=True,
                timeout=TRIAL_TIMEOUT_S,
            )
            windows.append((window_before, _band_counters(bed)))
            if small.returncode != 0:
                raise TestbedError(f"{policy}: the short fetch failed: {small.stderr.strip()}")
            small_outs.append(small.stdout)
        overlapped = large.poll() is None
        large_out, _ = large.communicate(timeout=TRIAL_TIMEOUT_S)
        after = _band_counters(bed)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return small_outs, large_out, overlapped, (before, windows, after)


def run(
    shortfirst_bin: str | Path,
    trials: int = 3,
    log_dir: Path | None = None,
    server_args: tuple[str, ...] = (),
    send_buffer_bytes: int = SEND_BUFFER_BYTES,
    congestion_control: str = CONGESTION_CONTROL,
    scheduler: str = "kernel",
) -> Result:
    """Builds a 10 Mbit testbed, runs ``trials`` fair/srpt pairs, tears it all down.
    ``server_args`` go to every ``shortfirst serve`` after the policy and address.
    ``scheduler="user"`` or ``"crovella"``: the server's own scheduler under a plain TBF."""
    if scheduler not in vocabulary.schedulers():
        raise ValueError(f"scheduler {scheduler!r}: expected one of {', '.join(vocabulary.schedulers())}")
    if scheduler != "kernel":
        server_args = ("--scheduler", scheduler, "--link-rate", str(RATE_BITS_PER_S), *server_args)
    if send_buffer_bytes:
        server_args = ("--send-buffer-bytes", str(send_buffer_bytes), *server_args)
    result = Result(
        RATE_BITS_PER_S, N_LARGE, LARGE_BYTES, SMALL_BYTES, list(server_args), congestion_control, scheduler
    )
    cleanup_leftovers()
    with tempfile.TemporaryDirectory(prefix="shortfirst-downloads-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        make_files(root)
        with Testbed(
            new_run_id(),
            RATE_BITS_PER_S,
            shortfirst_bin=shortfirst_bin,
            congestion_control=congestion_control or None,
            shaper="htb" if scheduler == "kernel" else "tbf",
        ) as bed:
            for _ in range(trials):
                for policy in ("fair", "srpt"):
                    result.trials.append(run_trial(bed, root, policy, log_dir, server_args))
    return result


def render(result: Result) -> str:
    lines = [
        f"{result.n_large} x {result.large_bytes // 1000} KB downloads + one {result.small_bytes // 1000} KB "
        f"response, uplink {result.rate_bits_per_s // 1_000_000} Mbit/s "
        f"({'HTB bands' if result.scheduler == 'kernel' else f'plain TBF, {result.scheduler} scheduler'}), "
        f"{sum(t.policy == 'fair' for t in result.trials)} trials per policy, "
        f"the 20 KB response fetched at {', '.join(map(str, SMALL_FETCH_AT_S))} s into each",
        f"shortfirst serve {' '.join(result.server_args)}".rstrip()
        + f"; server TCP: {result.congestion_control or 'namespace default'}",
        "",
        f"{'policy':<8}{'20 KB response (median)':>26}{'per trial (s)':>30}{'1 MB downloads (median)':>26}",
    ]
    for policy in ("fair", "srpt"):
        ts = [t for t in result.trials if t.policy == policy]
        trials = ", ".join(f"{statistics.median(t.small_s):.3f}" for t in ts)
        large = statistics.median(s for t in ts for s in t.large_s)
        lines.append(f"{policy:<8}{result.median_small_s(policy):>24.3f} s{trials:>30}{large:>24.3f} s")
    lines += ["", f"fair / srpt (20 KB response time): {result.ratio():.1f}x", ""]
    lines.append("bytes per HTB band, all trials of a policy:")
    bands = sorted(result.band_totals("srpt"))
    lines.append(f"{'policy':<8}" + "".join(f"{'band ' + str(b):>12}" for b in bands))
    for policy in ("fair", "srpt"):
        totals = result.band_totals(policy)
        lines.append(f"{policy:<8}" + "".join(f"{totals.get(b, 0):>12}" for b in bands))
    drops = {
        policy: sum(sum(t.band_drops.values()) for t in result.trials if t.policy == policy)
        for policy in ("fair", "srpt")
    }
    lines.append(f"packets dropped at full band queues: fair {drops['fair']}, srpt {drops['srpt']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shortfirst_lab downloads", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--bin", default=str(shortfirst_binary()), help="the shortfirst binary")
    parser.add_argument("--trials", type=int, default=3, help="fair/srpt pairs to run (1..=20)")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    parser.add_argument(
        "--send-buffer-bytes",
        type=int,
        default=SEND_BUFFER_BYTES,
        help=f"SO_SNDBUF of the server's client sockets (0: server default) [{SEND_BUFFER_BYTES}]",
    )
    parser.add_argument(
        "--congestion-control",
        default=CONGESTION_CONTROL,
        help=f"TCP congestion control in the server namespace ('' = default) [{CONGESTION_CONTROL}]",
    )
    parser.add_argument(
        "--scheduler",
        default="kernel",
        help="kernel: SO_PRIORITY bands under HTB; user, crovella: the server's own scheduler, TBF [kernel]",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for `shortfirst serve` (repeatable), e.g. --server-arg=--threads=2",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.trials <= 20:
        parser.error(f"--trials {args.trials}: expected 1..=20")
    if os.geteuid() != 0:
        print("demo-downloads needs root (network namespaces, tc)", file=sys.stderr)
        return 1
    log_dir = args.out.parent if args.out else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    result = run(
        args.bin,
        args.trials,
        log_dir,
        tuple(args.server_arg),
        args.send_buffer_bytes,
        args.congestion_control,
        args.scheduler,
    )
    print(render(result))
    if args.out:
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps(asdict(result), indent=2) + "\n")
        tmp.replace(args.out)
        print(f"\nwritten: {args.out}")
    return 0
