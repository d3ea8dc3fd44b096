"""Reading and validating experiment files (the schema is documented in `experiment.py`).

Validation is strict: an unknown key, a wrong type or an out-of-range value is an
`ExperimentError` naming the file, the dotted key and what was expected. `_Section` gives
typed access to one TOML table and remembers which keys were read, so a key nobody read is
an unknown key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import vocabulary
from .expmodel import (
    MAX_ARMS,
    MAX_GROUPS,
    MAX_PATHS,
    MAX_SCHEDULES,
    PACER_BURSTS,
    SYNCOOKIES,
    Arm,
    Calibration,
    Client,
    ClientGroup,
    Experiment,
    ExperimentError,
    RunTiming,
    Server,
    Uplink,
    Wan,
    WanPathSpec,
    Workload,
)
from .schedules import check_spec, specs_of

_GROUP_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(bit|kbit|mbit|gbit)?\s*$", re.IGNORECASE)
_RATE_UNIT = {None: 1, "bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}
_CC_RE = re.compile(r"^[a-z0-9_]{1,16}$")
_MODEL_RE = re.compile(r"^(open|partly-open:[1-9][0-9]*|closed:[1-9][0-9]*(,think=\S+)?)$")
# As `shortfirst serve --cutoffs` parses them (crates/core bands.rs): K = 1000, Ki = 1024, ...
_CUTOFF_RE = re.compile(r"^\s*[0-9]+\s*([KMG]i?)?B?\s*$", re.IGNORECASE)
_RRT_CUTOFF_RE = re.compile(r"^\s*[0-9]+(\.[0-9]+)?\s*(ns|us|ms|s)?\s*$", re.IGNORECASE)


def parse_rate(value: Any) -> int:
    """`"10mbit"` → 10_000_000; an int is taken as bits/s. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("a rate")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a positive rate")
        return value
    if isinstance(value, str):
        m = _RATE_RE.match(value)
        if m:
            unit = m.group(2).lower() if m.group(2) else None
            bits = round(float(m.group(1)) * _RATE_UNIT[unit])
            if bits > 0:
                return bits
    raise ValueError("a rate")


class _Section:
    """Typed, strict access to one TOML table; tracks which keys were consumed."""

    def __init__(self, path: Path, name: str, table: Any):
        self.path = path
        self.name = name
        if not isinstance(table, dict):
            raise ExperimentError(path, name, "a table", type(table).__name__)
        self.table = table
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.name}.{k}"

    def err(self, k: str, expected: str, got: Any = None) -> ExperimentError:
        return ExperimentError(self.path, self.key(k), expected, got)

    def get(self, k: str, default: Any = ...) -> Any:
        self.used.add(k)
        if k not in self.table:
            if default is ...:
                # A misspelt required key: name the key the file has, not only the missing one.
                typo = difflib.get_close_matches(k, [x for x in self.table if x not in self.used], n=1)
                if typo:
                    raise self.err(typo[0], f"{k} (unknown key; {self.key(k)} is required)")
                raise ExperimentError(self.path, self.key(k), "this key (it is required)")
            return default
        return self.table[k]

    def int(self, k: str, default: Any = ..., lo: int | None = None, hi: int | None = None) -> int:
        v = self.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(k, "an integer", v)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise self.err(k, f"an integer in [{lo if lo is not None else '-inf'}, {hi or 'inf'}]", v)
        return v

    def float(self, k: str, default: Any = ..., lo: float | None = None, lo_open: bool = False) -> float:
        v = self.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.err(k, "a number", v)
        v = float(v)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise self.err(k, f"a number {'>' if lo_open else '>='} {lo:g}", v)
        return v

    def str(self, k: str, default: Any = ...) -> str:
        v = self.get(k, default)
        if not isinstance(v, str):
            raise self.err(k, "a string", v)
        return v

    def finish(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise ExperimentError(
                self.path,
                self.key(unknown[0]),
                f"one of the known keys {sorted(self.used)} (unknown key)",
            )


_SECTIONS = ("experiment", "uplink", "workload", "client", "server", "run", "calibration", "wan", "setups")


def refuse_unrun(
    path: Path,
    exp: Experiment,
    kind: str,
    extra: tuple[tuple[str, bool], ...] = (),
    groups_run: bool = False,
) -> None:
    """What a kind built on the static sections but run at fixed loads (farm, browser) does
    not run: setups, WAN paths, client groups (unless ``groups_run``: then `[wan]` and
    `client.groups` are the kind's, `wan.paths` still not), load schedules, the baseline
    rerun, and the kind's `extra` (key, present) pairs; ExperimentError naming the first key
    present."""
    for key, present in (
        ("setups", bool(exp.setups)),
        ("wan", exp.wan is not None and not groups_run),
        ("wan.paths", exp.wan is not None and bool(exp.wan.paths)),
        ("client.groups", bool(exp.client.groups) and not groups_run),
        ("client.load_schedule", bool(exp.client.load_schedule or exp.client.load_schedules)),
        ("experiment.baseline_rerun", exp.baseline_rerun),
        *extra,
    ):
        if present:
            raise ExperimentError(path, key, f"nothing: a {kind} experiment has no {key}")


def experiment_from_dict(
    doc: dict[str, Any], path: str | Path = "<experiment>", text: str = ""
) -> Experiment:
    """Validates a parsed experiment: one section after another in file order, each read by its
    own function (`_experiment_head`, `_uplink`, ...) with each key read where its check is;
    helpers take the sections that repeat (groups, paths)."""
    path = Path(path)
    for k in doc:
        if k not in _SECTIONS:
            raise ExperimentError(path, k, f"one of the sections {list(_SECTIONS)} (unknown section)")
    for required in ("experiment", "workload", "run"):
        if required not in doc:
            raise ExperimentError(path, required, "this section (it is required)")
    head = _experiment_head(_Section(path, "experiment", doc["experiment"]))
    uplink = _uplink(_Section(path, "uplink", doc.get("uplink", {})))
    workload = _workload(_Section(path, "workload", doc["workload"]))
    client = _client(_Section(path, "client", doc.get("client", {})))
    wan = _wan(path, doc.get("wan"), client)
    server = _server(_Section(path, "server", doc.get("server", {})))
    timing = _run_timing(_Section(path, "run", doc["run"]), client)
    cal = _Section(path, "calibration", doc.get("calibration", {}))
    calibration = Calibration(
        sizes=cal.int("sizes", 16, lo=2, hi=200), repeats=cal.int("repeats", 5, lo=1, hi=100)
    )
    cal.finish()

    exp = Experiment(
        **head,
        uplink=uplink,
        workload=workload,
        client=client,
        server=server,
        run=timing,
        calibration=calibration,
        wan=wan,
        source=text,
    )
    if "setups" in doc:
        from .setups import parse_setups

        exp = replace(exp, setups=parse_setups(doc, path))
    if exp.baseline_rerun and not (exp.baselines or any(a.policy == "fair" for a in exp.arm_list())):
        raise ExperimentError(
            path,
            "experiment.baseline_rerun",
            "a baseline to rerun: experiment.baselines, or a fair arm",
            True,
        )
    if exp.baseline_rerun and exp.is_overload():
        raise ExperimentError(path, "experiment.baseline_rerun", "not in an overload experiment", True)
    _check_schedulers(path, exp)
    _check_bands(path, exp)
    return exp


def _check_bands(path: Path, exp: Experiment) -> None:
    """A kernel `srpt` arm's cutoffs fit the uplink's tree: a socket priority with no band
    behind it falls into the tree's default class, band 0 (set-up), ahead of everything."""
    if not any(a.policy == "srpt" and a.scheduler == "kernel" for a in exp.arm_list()):
        return
    cutoffs = exp.server.cutoffs
    if cutoffs == "auto":
        count = vocabulary.auto_data_bands() - 1
    else:
        count = len(cutoffs.split(",")) if cutoffs else len(vocabulary.default_cutoffs_bytes())
    bands = exp.uplink.bands if exp.uplink.bands is not None else vocabulary.default_data_bands()
    if count + 1 > bands:
        what = f"{cutoffs!r}" if cutoffs else "the server's default"
        raise ExperimentError(
            path,
            "uplink.bands",
            f"at least {count + 1}: the data bands that server.cutoffs ({what}) make for a kernel srpt arm",
            bands,
        )


def _experiment_head(e: _Section) -> dict[str, Any]:
    """`[experiment]`: the `Experiment` fields it sets (name, arms or policies, loads, ...)."""
    name = e.str("name")
    if not _NAME_RE.match(name):
        raise e.err("name", "letters, digits, '_', '.' or '-' only", name)
    description = e.str("description", "")
    policies, arms = _policies_or_arms(e)
    loads = e.get("loads")
    if not isinstance(loads, list) or not loads:
        raise e.err("loads", "a non-empty list of numbers in (0, 1.5]", loads)
    for ld in loads:
        if isinstance(ld, bool) or not isinstance(ld, int | float) or not 0 < ld <= 1.5:
            raise e.err("loads", "each load a number in (0, 1.5]", ld)
    if len({round(float(x), 2) for x in loads}) != len(loads):
        raise e.err("loads", "no duplicates (loads are compared to two decimals)", loads)
    repeats = e.int("repeats", 1, lo=1, hi=100)
    seed = e.int("seed", 1, lo=0)
    bl = e.get("baselines", [])
    if arms:
        labels = [a.label for a in arms]
        if isinstance(bl, list) and all(isinstance(x, str) for x in bl):
            bl = [x.strip().removesuffix("/kernel") for x in bl]  # written as in arms
        if not isinstance(bl, list) or len(set(bl)) != len(bl) or set(bl) - set(labels):
            raise e.err("baselines", f"a list of distinct arms of experiment.arms {labels}", bl)
    elif not isinstance(bl, list) or len(set(bl)) != len(bl) or set(bl) - set(policies):
        raise e.err("baselines", f"a list of distinct policies of experiment.policies {policies}", bl)
    rerun = e.get("baseline_rerun", False)
    if not isinstance(rerun, bool):
        raise e.err("baseline_rerun", "true or false", rerun)
    e.finish()
    return {
        "name": name,
        "description": description,
        "policies": tuple(policies),
        "arms": arms,
        "baselines": tuple(bl),
        "baseline_rerun": rerun,
        "loads": tuple(float(x) for x in loads),
        "repeats": repeats,
        "seed": seed,
    }


def _uplink(u: _Section) -> Uplink:
    """`[uplink]`: the bottleneck link and the server host's TCP settings."""
    rate_raw = u.get("rate", "10mbit")
    try:
        rate = parse_rate(rate_raw)
    except ValueError:
        raise u.err("rate", 'a rate such as "10mbit", "100mbit" or an integer in bits/s', rate_raw) from None
    uplink = Uplink(
        rate_bits_per_s=rate,
        mtu=u.int("mtu", 1500, lo=576, hi=9000),
        accept_queue=u.int("accept_queue", 512, lo=1, hi=65535),
        bands=u.int("bands", vocabulary.default_data_bands(), lo=1, hi=7),
        rto_min_ms=u.int("rto_min_ms", 0, lo=0, hi=60_000),
        queue_packets=u.int("queue_packets", 10_000, lo=1, hi=100_000),
        congestion_control=u.str("congestion_control", ""),
        syn_queue=u.int("syn_queue", 0, lo=0, hi=65535),
        syncookies=u.str("syncookies", ""),
        synack_retries=u.int("synack_retries", 0, lo=0, hi=255),
        initial_rto_ms=u.int("initial_rto_ms", 0, lo=0, hi=60_000),
    )
    if 0 < uplink.initial_rto_ms < 10:
        raise u.err("initial_rto_ms", "0 (the kernel's 1 s) or 10-60000 ms", uplink.initial_rto_ms)
    if uplink.syncookies and uplink.syncookies not in SYNCOOKIES:
        raise u.err("syncookies", '"" (the kernel\'s), "off", "on" or "always"', uplink.syncookies)
    if uplink.congestion_control and not _CC_RE.match(uplink.congestion_control):
        raise u.err(
            "congestion_control",
            'a TCP congestion control name such as "reno", or ""',
            uplink.congestion_control,
        )
    u.finish()
    return uplink


def _workload(w: _Section) -> Workload:
    """`[workload]`: the file set and the request trace."""
    kind = w.str("kind")
    if not kind or any(c.isspace() for c in kind):
        raise w.err("kind", "a workload kind such as wc98like, surge, bpareto:A,MIN,MAX", kind)
    workload = Workload(
        kind=kind,
        files=w.int("files", lo=1),
        requests=w.int("requests", lo=1),
        seed=w.int("seed", 42, lo=0),
    )
    w.finish()
    return workload


def _client(c: _Section) -> Client:
    """`[client]`: the load generator's model, groups, load schedules and patience."""
    model = c.str("model", "open")
    if not _MODEL_RE.match(model):
        raise c.err("model", "open, partly-open:K or closed:N[,think=DIST]", model)
    n_clients = c.int("clients", 64, lo=1, hi=1_000_000)
    client = Client(
        model=model,
        clients=n_clients,
        timeout_s=c.float("timeout_s", 300.0, lo=0.0, lo_open=True),
        groups=_groups(c.path, c.get("groups", []), n_clients),
        load_schedule=c.str("load_schedule", ""),
        load_schedules=specs_of(c, MAX_SCHEDULES),
        requests_per_connection=c.int("requests_per_connection", 1, lo=1, hi=10_000),
        abort_after_s=c.float("abort_after_s", 0.0, lo=0.0),
        retries=c.int("retries", 0, lo=0, hi=100),
        syn_retries=c.int("syn_retries", 0, lo=0, hi=127),
    )
    if client.load_schedule:
        check_spec(c, "load_schedule", client.load_schedule)
        if client.load_schedules:
            raise c.err("load_schedules", "either load_schedule or load_schedules, not both")
    if (client.load_schedule or client.load_schedules) and not model.startswith(("open", "partly-open")):
        key = "load_schedule" if client.load_schedule else "load_schedules"
        raise c.err(key, "the open or partly-open model (a closed loop sets its own rate)", model)
    if client.retries and not client.abort_after_s:
        raise c.err(
            "retries", "0 unless client.abort_after_s > 0 (a retry follows a user abort)", client.retries
        )
    c.finish()
    return client


def _server(s: _Section) -> Server:
    """`[server]`: the `shortfirst serve` settings common to every arm."""
    cutoffs = s.str("cutoffs", "")
    if cutoffs not in ("", "auto") and not all(_CUTOFF_RE.match(x) for x in cutoffs.split(",")):
        raise s.err("cutoffs", '"" (policy default), "auto" or a list like "1K,2K,5K,20K,50K"', cutoffs)
    rrt_cutoffs = s.str("rrt_cutoffs", "")
    if rrt_cutoffs not in ("", "auto") and not all(_RRT_CUTOFF_RE.match(x) for x in rrt_cutoffs.split(",")):
        raise s.err("rrt_cutoffs", '"" (server default), "auto" or a list like "50ms,100ms,1s"', rrt_cutoffs)
    at_max = s.str("at_max_connections", "")
    if at_max and at_max not in vocabulary.at_max_connections():
        raise s.err(
            "at_max_connections",
            f'"" (the server\'s default) or one of {"|".join(vocabulary.at_max_connections())}',
            at_max,
        )
    pacer_burst = s.str("pacer_burst", "link")
    if pacer_burst not in PACER_BURSTS:
        raise s.err("pacer_burst", " or ".join(f'"{b}"' for b in PACER_BURSTS), pacer_burst)
    fraction = s.float("pacer_rate_fraction", 0.0)
    if fraction != 0.0 and not 0.5 <= fraction <= 1.0:
        raise s.err("pacer_rate_fraction", "0 (the server's default) or a number in [0.5, 1]", fraction)
    extra = _extra_args(s)
    server = Server(
        cutoffs=cutoffs,
        rrt_cutoffs=rrt_cutoffs,
        port=s.int("port", 8080, lo=1, hi=65535),
        send_buffer_bytes=s.int("send_buffer_bytes", 32_768, lo=0, hi=1 << 30),
        max_connections=s.int("max_connections", 0, lo=0, hi=10_000_000),
        at_max_connections=at_max,
        extra_args=tuple(extra),
        write_concurrency=s.int("write_concurrency", 0, lo=0, hi=1_000_000),
        pacer_burst=pacer_burst,
        pacer_rate_fraction=fraction,
    )
    s.finish()
    return server


def _extra_args(s: _Section) -> list[str]:
    """`server.extra_args`: strings, none setting what a `[server]` key given beside them sets."""
    extra = s.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
        raise s.err("extra_args", "a list of strings", extra)
    for key, flag in (
        ("max_connections", "--max-connections"),
        ("at_max_connections", "--at-max-connections"),
    ):
        if key in s.table and any(a.split("=", 1)[0] == flag for a in extra):
            raise s.err("extra_args", f"no {flag} beside server.{key} (the key sets it)", extra)
    return extra


def _run_timing(r: _Section, client: Client) -> RunTiming:
    """`[run]`: duration, warm-up and a drain timeout outlasting every request's patience."""
    duration = r.float("duration_s", lo=0.0, lo_open=True)
    warmup = r.float("warmup_s", 0.0, lo=0.0)
    if warmup >= duration:
        raise r.err("warmup_s", f"less than run.duration_s ({duration:g})", warmup)
    timing = RunTiming(
        duration_s=duration,
        warmup_s=warmup,
        drain_timeout_s=r.float("drain_timeout_s", 330.0, lo=0.0, lo_open=True),
    )
    r.finish()
    if timing.drain_timeout_s <= client.timeout_s:
        raise r.err(
            "drain_timeout_s",
            f"more than client.timeout_s ({client.timeout_s:g}), so the generator can time out its own "
            "requests before the runner stops it",
            timing.drain_timeout_s,
        )
    patience_s = client.abort_after_s * (client.retries + 1)
    if timing.drain_timeout_s <= patience_s:
        raise r.err(
            "drain_timeout_s",
            f"more than client.abort_after_s x (client.retries + 1) ({patience_s:g}), so a request's "
            "last attempt can end before the runner stops the generator",
            timing.drain_timeout_s,
        )
    return timing


#: `serve` flags the runner sets per arm; in `server.extra_args` they would contradict the arm.
_ARM_FLAGS = (
    "--scheduler",
    "--link-rate",
    "--uplink-rate",
    "--write-concurrency",
    "--pacer-burst-bytes",
    "--pacer-rate-fraction",
)


def _policies_or_arms(e: _Section) -> tuple[list[str], tuple[Arm, ...]]:
    """`experiment.policies` (each under the kernel's bands) or `experiment.arms` (each a
    `POLICY[/SCHEDULER]`), exactly one of them: the distinct policies in order and the arms as
    written (none with `policies`). The names are the binary's (`vocabulary`)."""
    if "arms" in e.table and "policies" in e.table:
        raise e.err("arms", "either experiment.policies or experiment.arms, not both")
    kernel = vocabulary.serve_policies("kernel")
    if "arms" not in e.table:
        policies = e.get("policies")
        if not isinstance(policies, list) or not policies:
            raise e.err("policies", f"a non-empty list of {'|'.join(kernel)} (or experiment.arms)", policies)
        for p in policies:
            if p not in kernel:
                raise e.err("policies", f"each policy one of {'|'.join(kernel)}", p)
        if len(set(policies)) != len(policies):
            raise e.err("policies", "no duplicates", policies)
        return policies, ()
    raw = e.get("arms")
    form = f"POLICY[/SCHEDULER] with POLICY one of {'|'.join(vocabulary.all_serve_policies())}"
    form += f" and SCHEDULER one of {'|'.join(vocabulary.schedulers())}"
    if not isinstance(raw, list) or not raw:
        raise e.err("arms", f'a non-empty list of arms such as ["fair", "srpt", "srpt/user"] ({form})', raw)
    if len(raw) > MAX_ARMS:
        raise e.err("arms", f"at most {MAX_ARMS} arms", len(raw))
    arms: list[Arm] = []
    for item in raw:
        arm = _arm(e, item, form)
        if arm in arms:
            raise e.err("arms", 'no duplicate arms ("srpt" and "srpt/kernel" are the same arm)', item)
        arms.append(arm)
    return list(dict.fromkeys(a.policy for a in arms)), tuple(arms)


def _arm(e: _Section, item: Any, form: str) -> Arm:
    """One `POLICY[/SCHEDULER]` of `experiment.arms`, its policy one the scheduler runs."""
    if not isinstance(item, str):
        raise e.err("arms", f"each arm a string {form}", item)
    policy, slash, scheduler = item.strip().partition("/")
    if policy not in vocabulary.all_serve_policies() or (slash and scheduler not in vocabulary.schedulers()):
        raise e.err("arms", f"each arm {form}", item)
    arm = Arm(policy, scheduler or "kernel")
    runs = vocabulary.serve_policies(arm.scheduler)
    if arm.scheduler == "kernel" and policy not in runs:
        raise e.err(
            "arms",
            f"a kernel arm to rank by {'|'.join(runs)} "
            f"({policy} needs a user-space scheduler: {policy}/user)",
            item,
        )
    if policy not in runs:
        raise e.err(
            "arms",
            f"a user-space scheduler's arm to rank by {' or '.join(runs)} "
            f"(`serve --scheduler {arm.scheduler}` refuses {policy})",
            item,
        )
    return arm


def _check_schedulers(path: Path, exp: Experiment) -> None:
    """What the arms ask of the rest of the file: the server's own flags are the runner's, a
    user-space pacer needs a rate it accepts, `server.write_concurrency` a crovella arm, and
    the overload summary (setups, load schedules, loads above 1) compares policies only."""
    for a in exp.server.extra_args:
        if a.split("=", 1)[0] in _ARM_FLAGS:
            raise ExperimentError(
                path,
                "server.extra_args",
                f"none of {', '.join(_ARM_FLAGS)}: the runner sets them per arm (experiment.arms)",
                a,
            )
    schedulers = {a.scheduler for a in exp.arm_list()}
    if exp.server.write_concurrency and "crovella" not in schedulers:
        raise ExperimentError(
            path,
            "server.write_concurrency",
            '0 unless experiment.arms has a crovella arm (only "POLICY/crovella" limits write concurrency)',
            exp.server.write_concurrency,
        )
    if schedulers == {"kernel"}:
        return
    if exp.uplink.rate_bits_per_s > vocabulary.max_link_rate_bits_per_s():
        raise ExperimentError(
            path,
            "uplink.rate",
            f"at most {vocabulary.max_link_rate_bits_per_s()} bit/s with a user or crovella arm "
            "(the rate the server's pacer is given, `serve --uplink-rate`)",
            exp.uplink.rate_bits_per_s,
        )
    if exp.is_overload():
        raise ExperimentError(
            path,
            "experiment.arms",
            "kernel arms only in an overload experiment (setups, load schedules or a load above 1): "
            "its summary compares policies, not schedulers",
            [a.label for a in exp.arms],
        )


def _path_spec(sec: _Section) -> WanPathSpec:
    rtt = sec.float("rtt_ms", lo=0.0)
    if rtt > 5000:
        raise sec.err("rtt_ms", "a number in [0, 5000]", rtt)
    jitter = sec.float("jitter_ms", 0.0, lo=0.0)
    if jitter > rtt / 2:
        raise sec.err("jitter_ms", f"a number in [0, rtt_ms / 2 = {rtt / 2:g}]", jitter)
    loss = sec.float("loss", 0.0, lo=0.0)
    if loss > 0.5:
        raise sec.err("loss", "a probability in [0, 0.5]", loss)
    return WanPathSpec(rtt_ms=rtt, jitter_ms=jitter, loss=loss)


def _groups(path: Path, raw: Any, n_clients: int) -> tuple[ClientGroup, ...]:
    """`[[client.groups]]`: names unique, client counts summing to client.clients."""
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise ExperimentError(path, "client.groups", "an array of tables ([[client.groups]])", raw)
    if len(raw) > MAX_GROUPS:
        raise ExperimentError(path, "client.groups", f"at most {MAX_GROUPS} groups", len(raw))
    groups = []
    for i, table in enumerate(raw):
        g = _Section(path, f"client.groups[{i}]", table)
        name = g.str("name")
        if not _GROUP_NAME_RE.match(name):
            raise g.err("name", "1 to 32 of [A-Za-z0-9_-]", name)
        groups.append(ClientGroup(name=name, clients=g.int("clients", lo=1), path=_path_spec(g)))
        g.finish()
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ExperimentError(path, "client.groups", "unique group names", names)
    if groups and sum(g.clients for g in groups) != n_clients:
        raise ExperimentError(
            path,
            "client.groups",
            f"client counts summing to client.clients ({n_clients})",
            sum(g.clients for g in groups),
        )
    return tuple(groups)


def _wan(path: Path, raw: Any, client: Client) -> Wan | None:
    """`[wan]`: the emulator and, optionally, a sweep of paths applied to every client."""
    if raw is None:
        return Wan() if client.groups else None
    w = _Section(path, "wan", raw)
    emulator = w.str("emulator", "shortfirst")
    if emulator != "shortfirst":
        raise w.err("emulator", '"shortfirst" (the kernel netem qdisc is not supported yet)', emulator)
    raw_paths = w.get("paths", [])
    if not isinstance(raw_paths, list) or not all(isinstance(t, dict) for t in raw_paths):
        raise w.err("paths", "a list of tables {rtt_ms, jitter_ms, loss}", raw_paths)
    if len(raw_paths) > MAX_PATHS:
        raise w.err("paths", f"at most {MAX_PATHS} paths", len(raw_paths))
    paths = []
    for i, table in enumerate(raw_paths):
        ps = _Section(path, f"wan.paths[{i}]", table)
        paths.append(_path_spec(ps))
        ps.finish()
    if len({p.label for p in paths}) != len(paths):
        raise w.err("paths", "no duplicates (paths are named by rtt and loss)", [p.label for p in paths])
    jitter_mode = w.str("jitter_mode", "fifo")
    if jitter_mode not in ("fifo", "reorder"):
        raise w.err("jitter_mode", "fifo or reorder", jitter_mode)
    cc = w.str("congestion_control", "reno")
    if cc not in ("reno", "bbr"):
        raise w.err("congestion_control", "reno or bbr (what a child namespace can make its default)", cc)
    wan = Wan(emulator=emulator, paths=tuple(paths), seed=w.int("seed", 1, lo=0), jitter_mode=jitter_mode,
              congestion_control=cc)  # fmt: skip
    w.finish()
    if wan.paths and client.groups:
        raise ExperimentError(path, "wan.paths", "no paths when client.groups are given (one or the other)")
    if not wan.paths and not client.groups:
        raise ExperimentError(path, "wan", "client.groups or wan.paths (a [wan] section without either)")
    return wan
