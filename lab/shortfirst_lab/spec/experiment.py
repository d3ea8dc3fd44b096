"""Experiment files: the TOML schema, and the names the rest of the lab imports.

An experiment is one TOML file (read with `tomllib`) describing *what* to run; the runner
decides *how*. Validation is strict: an unknown key, a wrong type or an out-of-range value is
an `ExperimentError` naming the file, the dotted key and what was expected, because a typo in
an experiment file otherwise silently falls back to a default and wastes an hour of machine
time. Every default is written out below and in the shipped experiment files.

This module is the format's documentation and its public face: the dataclasses, the matrix and
the run names live in `expmodel.py`, reading and validating in `expcheck.py`; import them from here.

Schema (all sections optional except `[experiment]`, `[workload]` and `[run]`)::

    [experiment]
    name = "tocs-lan"                 # str, [A-Za-z0-9_.-]+
    description = "..."               # str
    policies = ["fair", "srpt"]       # non-empty list of fair|srpt|srpt2|srrt, no duplicates;
                                      # each runs under the kernel's bands (HTB tree, SO_PRIORITY);
                                      # the names are the binary's (`shortfirst vocabulary`)
    arms = ["fair", "srpt", "srpt/user", "srpt/crovella"]
                                      # instead of policies (one or the other): the matrix's arms,
                                      # each POLICY[/SCHEDULER], no duplicates ("srpt" is
                                      # "srpt/kernel"). SCHEDULER is who orders the uplink
                                      # (`serve --scheduler`): kernel (the default) = priority
                                      # bands under the HTB tree; user = the server's own pacer
                                      # and work-conserving pick, under a plain token bucket at
                                      # uplink.rate (no bands, no SO_PRIORITY), the server given
                                      # `--scheduler user --uplink-rate <uplink.rate>`; crovella =
                                      # the same pacer letting only server.write_concurrency
                                      # responses write (Crovella 1999's baseline). user and
                                      # crovella rank by fair, srpt (exact remaining bytes) or
                                      # las (least attained service: user-space arms only).
                                      # Runs are named by arm: srpt-user-load0.90-rep1. Not in
                                      # an overload experiment (setups, schedules, loads > 1).
    loads = [0.5, 0.7, 0.9]           # non-empty list of floats in (0, 1.5], no duplicates
    repeats = 1                       # int >= 1; repeat k uses load seed = seed + k - 1
    seed = 1                          # int >= 0, seed of the load generator
    baselines = ["fair"]              # compared with the others, weakest first (policycmp.py);
                                      # with arms, arm labels ("fair" = FAIR under the kernel)
    baseline_rerun = false            # true: the first baseline runs twice at every point
                                      # (fair-load0.70-rerun-rep1), and the summary gives its
                                      # stretch against itself (policycmp.rerun_rows). Not in
                                      # an overload experiment.

    [uplink]
    rate = "10mbit"                   # "<n>[kbit|mbit|gbit]" or an int (bits/s)
    mtu = 1500                        # int in [576, 9000]
    accept_queue = 512                # int >= 1 (listen backlog, as in the paper)
    bands = 7                         # data bands of the HTB tree, int in [1, 7]; default
                                      # `uplink setup`'s, the bands of serve's default cutoffs;
                                      # at least the bands of server.cutoffs (checked)
    rto_min_ms = 0                    # int >= 0: TCP minimum retransmission timeout on the
                                      # server's route (`ip route change ... rto_min`); 0 keeps
                                      # the kernel's 200 ms. Queueing in a starved low band can
                                      # exceed 200 ms, firing spurious timeouts that collapse
                                      # the window and back the timer off (counted per run in
                                      # tcp_counters.json: TCPSpuriousRtxHostQueues, TCPTimeouts).
    queue_packets = 10000             # int in [1, 100000]: each band's queue limit on the uplink
                                      # (`shortfirst uplink setup --queue-packets`, same default).
                                      # Only the server's sockets feed it, and each bounds its own
                                      # queueing; a drop here is a local transmit error that stalls
                                      # a socket with nothing in flight for its probe timer (>= 200
                                      # ms, then 500 ms a try; aborted after 15). Measured at load
                                      # 0.8 under FAIR: 100 packets → 21,000-45,000 drops and 77-179
                                      # aborted connections per 100 s; 10,000 → none.
    congestion_control = ""           # TCP congestion control in the server namespace ("reno",
                                      # "cubic", "bbr"...); "" inherits the host's default, which
                                      # makes results depend on the machine (see tocs-lan.toml)
    syn_queue = 0                     # int in [0, 65535]: the server namespace's SYN queue
                                      # (net.ipv4.tcp_max_syn_backlog); 0 = accept_queue
    syncookies = ""                   # "" (the kernel's: cookies when the SYN queue is full) |
                                      # "off" | "on" | "always" (net.ipv4.tcp_syncookies)
    synack_retries = 0                # int in [0, 255]: SYN-ACK retransmissions of the server
                                      # (net.ipv4.tcp_synack_retries); 0 keeps the kernel's 5
    initial_rto_ms = 0                # 0 (the kernel's 1 s) or int in [10, 60000]: when an
                                      # unanswered SYN or SYN-ACK of the server or the load
                                      # generator is first sent again (a BPF sock_ops program
                                      # on their cgroup, synrto.py; the overload paper's setup F)

    [workload]
    kind = "wc98like"                 # passed to `shortfirst workload generate --kind`
    files = 5000                      # int >= 1
    requests = 200000                 # int >= 1
    seed = 42                         # int >= 0

    [client]
    model = "open"                    # open | partly-open:K | closed:N[,think=DIST]
    clients = 64                      # client identities of the generator (`shortfirst load
                                      # --clients`); one client namespace runs the generator
    timeout_s = 300                   # float > 0: an attempt not done by then is a timeout.
                                      # Generous on purpose: under FAIR at 0.95 a 2 MB response
                                      # takes ~1.7 s / (1 − 0.95) ≈ 34 s, and cutting it short
                                      # would hide exactly the large-file penalty we measure.
    load_schedule = ""                # "" or a `shortfirst load --load-schedule` spec: the
                                      # load varies over time ("25s@0.2,25s@1.2", "const@1.4",
                                      # "w1"..."w10" -- then use loads = [1.0]); the run replays
                                      # the whole trace, cut at run.duration_s, so the trace must
                                      # cover duration_s at the schedule's mean multiplier
    load_schedules = []               # several schedules, one more dimension of the matrix
                                      # (run names carry each one's label: w1, const1.4, ...);
                                      # exclusive with load_schedule
    requests_per_connection = 1       # int in [1, 10000]: keep-alive, up to K requests per
                                      # connection (`shortfirst load --persistent K`)
    abort_after_s = 0                 # float >= 0: a user gives up an attempt after this long
                                      # (`--abort-after`); 0 = never (client.timeout_s applies)
    retries = 0                       # int in [0, 100]: new attempts after an abort (`--retries`)
    syn_retries = 0                   # int in [0, 127]: SYN retransmissions of the clients
                                      # (net.ipv4.tcp_syn_retries); 0 keeps the kernel's 6

    [[client.groups]]                 # optional, repeatable: client groups behind a WAN path
    name = "near"                     # [A-Za-z0-9_-]{1,32}, unique
    clients = 32                      # int >= 1: this many client identities (ids are given to
                                      # the groups in file order); the counts sum to client.clients
    rtt_ms = 40                       # float in [0, 5000]: round-trip delay added to the path
    jitter_ms = 0                     # float in [0, rtt_ms / 2]
    loss = 0.0                        # float in [0, 0.5]: drop probability per packet and direction

    [wan]                             # optional: only with client.groups or wan.paths
    emulator = "shortfirst"           # `shortfirst netem` (this kernel has no netem qdisc)
    paths = []                        # a sweep: each {rtt_ms, jitter_ms, loss} is one more
                                      # dimension of the matrix, applied to every client (one
                                      # group "all"); exclusive with client.groups
    seed = 1                          # int >= 0: the emulator's loss generator
    jitter_mode = "fifo"              # fifo (no reordering) | reorder (netem's jitter)
    congestion_control = "reno"       # the client namespace's TCP (reno or bbr: what a child
                                      # namespace can make its default)

    [server]
    cutoffs = ""                      # "" (the policy's default), "auto" or "1K,2K,..."
    rrt_cutoffs = ""                  # srrt's response-time cutoffs (`serve --rrt-cutoffs`):
                                      # "" (the server's default), "auto" or "50ms,100ms,..."
    port = 8080                       # int in [1, 65535]
    send_buffer_bytes = 32768         # SO_SNDBUF of client sockets; 0 = kernel autotuning.
                                      # The server moves a response to a better band when its
                                      # *written* bytes cross a cutoff; with an autotuned (up to
                                      # 4 MB) buffer a large response is written long before it
                                      # is sent and gets promoted early, so SRPT decays to FAIR.
                                      # 32 KB keeps written within ~64 KB of sent, no throughput
                                      # cost on a LAN (measured by the uplink work, downloads.py).
    max_connections = 0               # int >= 0: `serve --max-connections`; 0 keeps the
                                      # server's default (4096)
    at_max_connections = ""           # "" (the server's default: refuse) | "refuse" | "wait":
                                      # `serve --at-max-connections`, what happens beyond
                                      # max_connections. refuse: accept, answer 503, close;
                                      # wait: stop accepting until a connection closes, so new
                                      # ones wait in the accept queue (uplink.accept_queue) and
                                      # beyond it the kernel drops SYNs, as the paper's Apache
                                      # did at its 350 processes (overload-persistent-apache.toml)
    extra_args = []                   # further `shortfirst serve` arguments, list of strings
                                      # (not --scheduler, --uplink-rate, --write-concurrency:
                                      # the arms set those)
    write_concurrency = 0             # int >= 0: crovella arms' `serve --write-concurrency`
                                      # (responses that may write at once); 0 = the server's
                                      # default; only with a crovella arm
    pacer_burst = "link"              # "link" | "none": user-space arms' `serve
                                      # --pacer-burst-bytes`. link: the burst of the token bucket
                                      # that shapes their uplink (testbed.tbf_burst_bytes), which
                                      # an idle link lets out at line rate, as the kernel arms'
                                      # HTB does with its own; none: the pacer banks no credit
    pacer_rate_fraction = 0.0         # 0 (the server's default, 0.98) or a number in [0.5, 1]:
                                      # user-space arms' `serve --pacer-rate-fraction`, the
                                      # pacer's rate as a fraction of uplink.rate

    [run]
    duration_s = 300                  # float > 0: schedule length handed to the generator
    warmup_s = 30                     # float >= 0, < duration_s: excluded from every metric
    drain_timeout_s = 330             # float > client.timeout_s: how long in-flight requests may
                                      # take after the schedule ends before the run is stopped
                                      # and recorded as failed

    [calibration]
    sizes = 16                        # int >= 2: ladder of distinct file sizes fetched alone
    repeats = 5                       # int >= 1: fetches per size (the median is used)

    [setups.B]                        # optional, repeatable: a variant of uplink, client, server,
    wan.paths = [{rtt_ms = 100}]      # wan; one more matrix dimension (setups.py)
"""

from __future__ import annotations

from .expcheck import experiment_from_dict, parse_rate
from .expmodel import (
    MAX_ARMS,
    MAX_GROUPS,
    MAX_PATHS,
    MAX_SCHEDULES,
    SYNCOOKIES,
    Arm,
    Calibration,
    Client,
    ClientGroup,
    Experiment,
    ExperimentError,
    RunSpec,
    RunTiming,
    Server,
    Uplink,
    Wan,
    WanPathSpec,
    Workload,
    run_dir_name,
)
from .reader import load_experiment
from .schema import apply_override

__all__ = [
    "MAX_ARMS",
    "MAX_GROUPS",
    "MAX_PATHS",
    "MAX_SCHEDULES",
    "SYNCOOKIES",
    "Arm",
    "Calibration",
    "Client",
    "ClientGroup",
    "Experiment",
    "ExperimentError",
    "RunSpec",
    "RunTiming",
    "Server",
    "Uplink",
    "Wan",
    "WanPathSpec",
    "Workload",
    "apply_override",
    "experiment_from_dict",
    "load_experiment",
    "parse_rate",
    "run_dir_name",
]
