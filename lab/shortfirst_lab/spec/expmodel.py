"""The experiment as data: its sections as frozen dataclasses, the run matrix and the run names.

`experiment.py` documents the file format; `expcheck.py` reads and validates a file into these
classes. Nothing here reads files: an `Experiment` is built only by `expcheck`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .schedules import schedule_label
from .schema import SpecError

#: Most client groups (each gets a /24 of 10.78.0.0/16 in the testbed).
MAX_GROUPS = 200
#: Most points of a WAN path sweep.
MAX_PATHS = 64
#: Most load schedules of a matrix.
MAX_SCHEDULES = 64
#: `uplink.syncookies` → net.ipv4.tcp_syncookies.
SYNCOOKIES = {"off": 0, "on": 1, "always": 2}
#: `server.pacer_burst`: a user-space arm's idle burst, the shaping token bucket's or none.
PACER_BURSTS = ("link", "none")
#: Most arms of a matrix.
MAX_ARMS = 16


class ExperimentError(SpecError):
    """A bad static serving experiment file: names the file, the dotted key and what was expected."""


@dataclass(frozen=True)
class Uplink:
    rate_bits_per_s: int = 10_000_000
    mtu: int = 1500
    accept_queue: int = 512
    bands: int | None = None  # None: `shortfirst uplink setup`'s (the default cutoffs' bands)
    rto_min_ms: int = 0
    queue_packets: int = 10_000
    congestion_control: str = ""
    syn_queue: int = 0
    syncookies: str = ""
    synack_retries: int = 0
    initial_rto_ms: int = 0


@dataclass(frozen=True)
class Workload:
    kind: str
    files: int
    requests: int
    seed: int = 42


@dataclass(frozen=True)
class WanPathSpec:
    """Path properties between clients and server: added RTT, jitter, loss per direction."""

    rtt_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0

    @property
    def label(self) -> str:
        """`rtt100ms-loss2.5pct`: part of a run directory's name."""
        return f"rtt{self.rtt_ms:g}ms-loss{self.loss * 100:g}pct"


@dataclass(frozen=True)
class ClientGroup:
    name: str
    clients: int
    path: WanPathSpec


@dataclass(frozen=True)
class Wan:
    emulator: str = "shortfirst"
    paths: tuple[WanPathSpec, ...] = ()
    seed: int = 1
    jitter_mode: str = "fifo"
    congestion_control: str = "reno"


@dataclass(frozen=True)
class Client:
    model: str = "open"
    clients: int = 64
    timeout_s: float = 300.0
    groups: tuple[ClientGroup, ...] = ()
    load_schedule: str = ""
    load_schedules: tuple[str, ...] = ()
    requests_per_connection: int = 1
    abort_after_s: float = 0.0
    retries: int = 0
    syn_retries: int = 0


@dataclass(frozen=True)
class Server:
    cutoffs: str = ""
    rrt_cutoffs: str = ""
    port: int = 8080
    send_buffer_bytes: int = 32_768
    max_connections: int = 0
    at_max_connections: str = ""  # "" = the server's default (refuse) | refuse | wait
    extra_args: tuple[str, ...] = ()
    write_concurrency: int = 0  # crovella arms: `serve --write-concurrency`; 0 = the server's
    pacer_burst: str = "link"  # user-space arms: "link" (the shaper's burst) | "none"
    pacer_rate_fraction: float = 0.0  # user-space arms: `serve --pacer-rate-fraction`; 0 = default


@dataclass(frozen=True)
class RunTiming:
    duration_s: float
    warmup_s: float = 0.0
    drain_timeout_s: float = 330.0


@dataclass(frozen=True)
class Calibration:
    sizes: int = 16
    repeats: int = 5


@dataclass(frozen=True)
class Arm:
    """One arm of the matrix: a policy under a scheduler (`srpt`, `srpt/user`)."""

    policy: str
    scheduler: str = "kernel"

    @property
    def label(self) -> str:
        """As experiment files write arms: `srpt` under the kernel's bands, `srpt/user` otherwise."""
        return self.policy if self.scheduler == "kernel" else f"{self.policy}/{self.scheduler}"

    @property
    def name(self) -> str:
        """The arm's part of a run directory's name: `srpt`, `srpt-user`."""
        return self.label.replace("/", "-")


@dataclass(frozen=True)
class RunSpec:
    """One cell of the matrix: a policy under a scheduler at a load (on a WAN path of a sweep),
    repeat `repeat` (1-based)."""

    policy: str
    load: float
    repeat: int
    seed: int
    path: WanPathSpec | None = None
    schedule: str = ""  # the load schedule of the run ("" none)
    schedule_label: str = ""  # in the run's name when the schedule is a matrix dimension
    setup: str = ""  # the setup's name when the experiment has setups
    scheduler: str = "kernel"  # who orders the uplink (`serve --scheduler`)
    #: The baseline run again at its point, same trace and seed (`experiment.baseline_rerun`):
    #: its stretch against the first run is what the stretch measures by chance.
    rerun: bool = False

    @property
    def arm(self) -> Arm:
        return Arm(self.policy, self.scheduler)

    @property
    def run_id(self) -> str:
        return run_dir_name(
            self.policy,
            self.load,
            self.repeat,
            self.path,
            self.schedule_label,
            self.setup,
            self.scheduler,
            self.rerun,
        )


@dataclass(frozen=True)
class Experiment:
    name: str
    policies: tuple[str, ...]
    loads: tuple[float, ...]
    workload: Workload
    run: RunTiming
    description: str = ""
    repeats: int = 1
    seed: int = 1
    uplink: Uplink = field(default_factory=Uplink)
    client: Client = field(default_factory=Client)
    server: Server = field(default_factory=Server)
    calibration: Calibration = field(default_factory=Calibration)
    wan: Wan | None = None
    source: str = ""
    baselines: tuple[str, ...] = ()  # as written; empty: the default (`baseline_labels`)
    #: Run the first baseline twice at every point (`RunSpec.rerun`).
    baseline_rerun: bool = False
    #: `experiment.arms` as written; empty when the file gives `policies` (each under the kernel).
    arms: tuple[Arm, ...] = ()
    #: Named variants (setups.Setup: name, description, the experiment with its overrides).
    setups: tuple[Any, ...] = ()

    def schedules(self) -> tuple[tuple[str, str], ...]:
        """(spec, label) per load schedule of the matrix; the label is "" unless schedules are
        a dimension (`client.load_schedules`)."""
        c = self.client
        if c.load_schedules:
            return tuple((s, schedule_label(s)) for s in c.load_schedules)
        return ((c.load_schedule, ""),)

    def arm_list(self) -> tuple[Arm, ...]:
        """The arms of the matrix: as written, or each policy under the kernel's bands."""
        return self.arms or tuple(Arm(p) for p in self.policies)

    def arm_labels(self) -> tuple[str, ...]:
        return tuple(a.label for a in self.arm_list())

    def matrix(self) -> list[RunSpec]:
        """Runs in execution order: setup-major, then schedule, load, WAN path, repeat, arm.

        Arms at the same point run back to back, so slow drift of the shared machine
        (other tenants, thermal) affects the arms being compared alike.
        """
        if self.setups:
            return [replace(spec, setup=s.name) for s in self.setups for spec in s.experiment.matrix()]
        paths: tuple[WanPathSpec | None, ...] = self.wan.paths if self.wan and self.wan.paths else (None,)
        rerun = (self.rerun_arm(),) if self.baseline_rerun else ()
        return [
            RunSpec(
                policy=arm.policy,
                scheduler=arm.scheduler,
                load=ld,
                repeat=k,
                seed=self.seed + k - 1,
                path=path,
                schedule=spec,
                schedule_label=label,
                rerun=again,
            )  # fmt: skip
            for spec, label in self.schedules()
            for ld in self.loads
            for path in paths
            for k in range(1, self.repeats + 1)
            for arm, again in [(a, False) for a in self.arm_list()] + [(a, True) for a in rerun]
        ]

    def baseline_labels(self) -> tuple[str, ...]:
        """The baselines, weakest first: `baselines` as written, else FAIR under the kernel (or,
        without it, the first FAIR arm), then srpt when srpt and srrt both run. Arm labels,
        which are the policies when the experiment gives `policies`."""
        if self.baselines:
            return self.baselines
        labels = self.arm_labels()
        out = tuple(p for p in ("fair",) if p in labels)
        out = out or tuple(a.label for a in self.arm_list() if a.policy == "fair")[:1]
        if "srpt" in labels and "srrt" in labels:
            out += ("srpt",)
        return out

    def rerun_arm(self) -> Arm:
        """The baseline `baseline_rerun` runs twice: the weakest of `baseline_labels`."""
        label = self.baseline_labels()[0]
        return next(a for a in self.arm_list() if a.label == label)

    def is_overload(self) -> bool:
        """An overload experiment: setups, load schedules or a load above 1 (its summary is
        `overload.py`'s)."""
        c = self.client
        return bool(self.setups or c.load_schedule or c.load_schedules or max(self.loads) > 1)

    def for_run(self, spec: RunSpec) -> Experiment:
        """The experiment a run of the matrix runs under: its setup's, or this one."""
        for s in self.setups:
            if s.name == spec.setup:
                return s.experiment
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": {
                "name": self.name,
                "description": self.description,
            }
            | ({"arms": [a.label for a in self.arms]} if self.arms else {"policies": list(self.policies)})
            | {
                "loads": list(self.loads),
                "repeats": self.repeats,
                "seed": self.seed,
            }
            | ({"baselines": list(self.baselines)} if self.baselines else {})
            | ({"baseline_rerun": True} if self.baseline_rerun else {}),
            "uplink": vars(self.uplink).copy(),
            "workload": vars(self.workload).copy(),
            "client": _client_dict(self.client),
            "server": _server_dict(self.server),
            "run": vars(self.run).copy(),
            "calibration": vars(self.calibration).copy(),
            **_setups_dict(self.setups),
        } | ({"wan": _wan_dict(self.wan)} if self.wan else {})


def _setups_dict(setups: tuple[Any, ...]) -> dict[str, Any]:
    return (
        {"setups": {s.name: {"description": s.description, **s.overrides} for s in setups}} if setups else {}
    )


def _server_dict(s: Server) -> dict[str, Any]:
    out = {**vars(s), "extra_args": list(s.extra_args)}
    if not s.write_concurrency:
        del out["write_concurrency"]  # at its default, left out like the file leaves it out
    if not s.at_max_connections:
        del out["at_max_connections"]  # likewise
    return out


def _path_dict(p: WanPathSpec) -> dict[str, Any]:
    return {"rtt_ms": p.rtt_ms, "jitter_ms": p.jitter_ms, "loss": p.loss}


def _client_dict(c: Client) -> dict[str, Any]:
    out: dict[str, Any] = {"model": c.model, "clients": c.clients, "timeout_s": c.timeout_s}
    if c.load_schedule:
        out["load_schedule"] = c.load_schedule
    if c.load_schedules:
        out["load_schedules"] = list(c.load_schedules)
    for k, default in (
        ("requests_per_connection", 1),
        ("abort_after_s", 0.0),
        ("retries", 0),
        ("syn_retries", 0),
    ):
        if getattr(c, k) != default:
            out[k] = getattr(c, k)
    if c.groups:
        out["groups"] = [{"name": g.name, "clients": g.clients, **_path_dict(g.path)} for g in c.groups]
    return out


def _wan_dict(w: Wan) -> dict[str, Any]:
    return {
        "emulator": w.emulator,
        "paths": [_path_dict(p) for p in w.paths],
        "seed": w.seed,
        "jitter_mode": w.jitter_mode,
        "congestion_control": w.congestion_control,
    }


def run_dir_name(
    policy: str,
    load: float,
    repeat: int,
    path: WanPathSpec | None = None,
    schedule_label: str = "",
    setup: str = "",
    scheduler: str = "kernel",
    rerun: bool = False,
) -> str:
    """`<arm>-load<ρ>[-<path>][-<schedule>][-setup<name>][-rerun]-rep<k>`, ρ with two decimals,
    the arm being the policy, then `-<scheduler>` unless it is the kernel's (`fair-load0.80-rep1`,
    `srpt-user-load0.90-rep1`, `srpt-load0.90-rtt100ms-loss2.5pct-rep1`, `fair-load1.00-w1-setupB-rep1`,
    `fair-load0.70-rerun-rep1`)."""
    arm = Arm(policy, scheduler).name
    middle = f"-{path.label}" if path is not None else ""
    middle += f"-{schedule_label}" if schedule_label else ""
    middle += f"-setup{setup}" if setup else ""
    middle += "-rerun" if rerun else ""
    return f"{arm}-load{load:.2f}{middle}-rep{repeat}"
