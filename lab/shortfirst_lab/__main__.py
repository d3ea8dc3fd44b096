"""`python -m shortfirst_lab VERB ...`: the lab's one command line.

Verbs parsed here (one function each; add one by writing `_cmd_x(args)` and registering it in
`SUBCOMMANDS` with a function that adds its arguments):

    validate FILE...                                  check experiment files of any kind (static serving,
                                                      farm, browser, gatekeeper on any backend), print what
                                                      each runs
    run EXP.toml --out DIR [--resume] [--bin PATH]   run an experiment, then build its report
    report DIR [--resimulate [--bin PATH]]            rebuild summary.json and report.html from raw logs
                                                      (overload experiments: `overload`; a farm:
                                                      `farmreport`; a browser one: `browserreport`);
                                                      --resimulate
                                                      first redoes each run's ideals (idealsim.py)
    check-report DIR/report.html                      open the page in headless Chromium, check images

Verbs whose module parses its own arguments (`MODULE_VERBS`: `VERB --help` shows them): bench
(`BENCHES`: every benchmark), theory, tpcw, overload, results, series, inflight, downloads, cpus, probe,
depcheck. Every verb's errors end here: a `LabError` is printed as one line, exit code 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, help="experiment TOML file")
    p.add_argument("--out", type=Path, required=True, help="experiment directory (raw logs, summary, report)")
    p.add_argument("--resume", action="store_true", help="continue DIR: skip runs whose run.json says ok")
    p.add_argument(
        "--bin", type=Path, default=None, help="shortfirst binary (default: target/release/shortfirst)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--server-cpus",
        metavar="LIST",
        help="CPUs of the server's processes, e.g. 1 (default: the lab's own)",
    )
    p.add_argument(
        "--generator-cpus", metavar="LIST", help="CPUs of the load generator, e.g. 0 (default: the lab's own)"
    )
    _add_set(p)


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a key of the experiment file (VALUE in TOML syntax), e.g. run.duration_s=60",
    )


def _cmd_run(a: argparse.Namespace) -> int:
    from .kit import shortfirst_binary
    from .runners import static as runner
    from .spec.reader import read_spec
    from .testbed.placement import Placement

    placement = Placement.parse(a.server_cpus, a.generator_cpus)
    bin_path = a.bin or shortfirst_binary()
    spec = read_spec(a.experiment, a.overrides)
    if spec.kind == "browser":
        from .runners import browser

        summary = browser.run_browser_experiment(
            spec.value, a.out, bin_path, resume=a.resume, progress=not a.no_progress, placement=placement
        )
        print(_format(summary))
        print(f"\nreport: {(a.out / 'report.html').resolve()}")
        print(f"summary: {(a.out / 'summary.json').resolve()}")
        return 0
    if spec.kind == "farm":
        from .runners import farm

        summary = farm.run_farm_experiment(
            spec.value, a.out, bin_path, resume=a.resume, progress=not a.no_progress, placement=placement
        )
        print(_format(summary))
        print(f"\nreport: {(a.out / 'report.html').resolve()}")
        print(f"summary: {(a.out / 'summary.json').resolve()}")
        return 0
    summary = runner.run_experiment(
        a.experiment,
        a.out,
        bin_path,
        resume=a.resume,
        progress=not a.no_progress,
        overrides=a.overrides,
        placement=placement,
    )
    print(_format(summary))
    print(f"\nreport: {(a.out / 'report.html').resolve()}")
    print(f"summary: {(a.out / 'summary.json').resolve()}")
    return 0


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="experiment directory written by `run`")
    p.add_argument(
        "--resimulate",
        action="store_true",
        help="first rerun `shortfirst sim` for each run's ideals, payload and wire cost (sim/, sim-wire/)",
    )
    p.add_argument(
        "--bin", type=Path, default=None, help="shortfirst binary (default: target/release/shortfirst)"
    )


def _format(summary: dict) -> str:
    """The terminal table of any summary: an overload one has workloads, a farm's hosts."""
    from .analysis import browserreport, farmreport, overload, report

    if "cells" in summary:
        return browserreport.format_table(summary)
    if "hosts" in summary:
        return farmreport.format_table(summary)
    return overload.format_table(summary) if "workloads" in summary else report.format_table(summary)


def _cmd_report(a: argparse.Namespace) -> int:
    from .analysis import farmreport, overload, report
    from .spec.reader import load_experiment, read_spec

    exp_path = a.dir / "experiment.toml"
    spec = read_spec(exp_path) if exp_path.exists() else None
    if spec is not None and spec.kind == "browser":
        from .analysis import browserreport

        print(_format(browserreport.build(a.dir)))
        print(f"\nreport: {(a.dir / 'report.html').resolve()}")
        return 0
    if spec is not None and spec.kind == "farm":
        if a.resimulate:
            from .kit import shortfirst_binary
            from .runners import farm

            bin_path = a.bin or shortfirst_binary()
            for run, status in farm.resimulate(a.dir, spec.value, bin_path).items():
                print(f"{run}: sim {status}", file=sys.stderr)
        print(_format(farmreport.build(a.dir)))
        print(f"\nreport: {(a.dir / 'report.html').resolve()}")
        return 0
    if a.resimulate:
        _resimulate(a.dir, a.bin)
    if exp_path.exists() and overload.applies(load_experiment(exp_path)):
        summary = overload.build(a.dir)  # load schedules, setups, ρ > 1: the overload summary
    else:
        summary = report.build(a.dir)
    print(_format(summary))
    print(f"\nreport: {(a.dir / 'report.html').resolve()}")
    return 0


def _resimulate(out: Path, bin_path: Path | None) -> None:
    from .analysis import idealsim
    from .kit import shortfirst_binary
    from .runners import static as runner
    from .spec.reader import load_experiment

    exp_path = out / "experiment.toml"
    if not exp_path.exists():
        raise runner.RunnerError(f"{exp_path}: missing; is {out} an experiment directory?")
    bin_path = bin_path or shortfirst_binary()
    for run, status in idealsim.resimulate(out, load_experiment(exp_path), bin_path).items():
        print(f"{run}: sim {status}", file=sys.stderr)


def _add_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiments", type=Path, nargs="+", help="experiment files of any kind (TOML)")
    _add_set(p)


def _cmd_validate(a: argparse.Namespace) -> int:
    from .spec.reader import read_spec

    for path in a.experiments:
        spec = read_spec(path, a.overrides)
        kind = spec.kind if spec.backend is None else f"{spec.kind} on {spec.backend}"
        print(f"{path}: ok — {kind}: {_plan(spec)}")
        if spec.kind == "browser":
            for r in spec.value.matrix():
                print(f"  {r.run_id}")
        if spec.kind in ("static", "farm"):
            for r in spec.value.matrix():
                print(f"  {r.run_id}  seed={r.spec.seed if spec.kind == 'farm' else r.seed}")
    return 0


def _plan(spec) -> str:
    """One line on what a validated experiment file would run."""
    v = spec.value
    if spec.kind == "browser":
        return (
            f"{v.name}: {len(v.matrix())} cells of up to {v.loads_per_cell} loads of each of "
            f"{len(v.pages)} pages, the background {v.exp.run.duration_s:g} s"
        )
    if spec.kind == "farm":
        return (
            f"{v.name}: {len(v.matrix())} runs on {v.hosts} hosts behind HAProxy "
            f"× {v.exp.run.duration_s:g} s schedule (+ drain up to {v.exp.run.drain_timeout_s:g} s each)"
        )
    if spec.kind == "static":
        return (
            f"{v.name}: {len(v.matrix())} runs × {v.run.duration_s:g} s schedule "
            f"(+ drain up to {v.run.drain_timeout_s:g} s each)"
        )
    if spec.kind == "pg":
        oh, ol = v.overhead, v.overload
        n = (
            len(oh.scripts)
            * len(oh.clients)
            * sum(len(oh.protocols) - (a == "pgbouncer" and "prepared" in oh.protocols) for a in oh.arms)
        )
        return (
            f"overhead: {n} points × {oh.duration_s:g} s; overload: {len(ol.arms) * len(ol.loads)} points "
            f"(arm × load) × {ol.duration_s:g} s"
        )
    if spec.backend == "bookstore":
        from .runners.gatekeeper.tpcw.config import browsers_for

        points = sum(len(browsers_for(v, m)) for m in v["modes"]["list"])
        return f"{points} points (mode × browsers) × {v['load']['duration_s']:g} s"
    if spec.backend == "synthetic":
        n = {
            k: len(str(v.get(k, "")).split(","))
            for k in ("configs", "closed_factors", "open_configs", "open_factors")
        }
        runs = n["configs"] * n["closed_factors"] + n["open_configs"] * n["open_factors"]
        return f"{runs} runs (closed and open configuration × load factor), then the overhead rounds"
    runs = len(v.modes) * len(v.models)
    return f"{runs} runs (mode × model) × {v.duration_s:g} s"


def _add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("html", type=Path, help="an HTML page, e.g. DIR/report.html")


def _cmd_check(a: argparse.Namespace) -> int:
    from .analysis.browsercheck import check_images

    res = check_images(a.html)
    print(f"{a.html}: {res.loaded}/{res.total} images rendered")
    for b in res.broken:
        print(f"  broken: {b}")
    return 0 if res.ok else 1


SUBCOMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {
    "run": ("run an experiment and build its report", _add_run, _cmd_run),
    "report": ("rebuild summary.json and report.html from the raw logs", _add_report, _cmd_report),
    "validate": ("validate experiment files and print their run matrix", _add_validate, _cmd_validate),
    "check-report": ("render a report in headless Chromium and check every image", _add_check, _cmd_check),
}


#: Verbs whose module parses its own arguments: VERB → (module, what it does).
MODULE_VERBS: dict[str, tuple[str, str]] = {
    "theory": ("theory.cli", "M/G/1 theory: mean response times, Crovella's figures"),
    "tpcw": (
        "runners.gatekeeper.tpcw.cli",
        "the gatekeeper on the TPC-W bookstore: sweep an experiment file, report",
    ),
    "overload": ("analysis.overload", "the overload summary and figures across experiment directories"),
    "results": ("analysis.pages", "publish report pages and large results outside main, fetch them back"),
    "series": ("analysis.series", "a run's per-second client-side series"),
    "inflight": ("analysis.inflight", "long responses in transfer at once, per run"),
    "downloads": ("runners.downloads", "the two-sizes downloads experiment on a shaped uplink"),
    "cpus": ("testbed.cpus", "reserve, use and release CPUs for a long run (cpusets)"),
    "probe": ("testbed.probe", "network probes run inside testbed namespaces (wanprobe's too)"),
    "depcheck": ("depcheck", "declared Python dependencies = imports"),
}
#: `bench NAME`: the benchmarks (`make bench-NAME`), a lab module or a script of the repository.
BENCHES: dict[str, tuple[str, str]] = {
    "netem": ("runners.netembench", "packets/s and CPU per packet through shortfirst netem (root)"),
    "gatekeeper-synthetic": (
        "runners.gatekeeper.synthetic.cli",
        "the gatekeeper vs direct on the synthetic upstream",
    ),
    "gatekeeper-foreign": (
        "runners.gatekeeper.foreign.bench",
        "the gatekeeper in front of datasette and json-server",
    ),
    "pg": (
        "runners.gatekeeper.pg.bench",
        "the PostgreSQL gatekeeper beside direct and PgBouncer, driven by pgbench",
    ),
    "serve": ("bench/serve.py", "shortfirst serve against nginx, driven by wrk (root)"),
    "load": ("crates/load/bench/bench_load.py", "the load generator's highest rate, beside wrk"),
    "sim": ("runners.simbench", "the simulator's speed per policy (jobs per second)"),
}


def _run_module(target: str, argv: list[str]) -> int:
    """Runs a verb's module (`main(argv)`) or a repository script (as `__main__`, with argv)."""
    if target.endswith(".py"):
        import runpy

        from .kit import REPO

        script = REPO / target
        saved = sys.argv
        sys.argv = [str(script), *argv]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = saved
        return 0
    import importlib

    if target == "testbed.probe" and argv and argv[0] in _wan_probe_commands():
        target = "testbed.wanprobe"
    rc = importlib.import_module(f"{__package__}.{target}").main(argv)
    return 0 if rc is None else rc


def _wan_probe_commands() -> tuple[str, ...]:
    from .testbed.wanprobe import COMMANDS

    return COMMANDS


def _delegate(argv: list[str]) -> int | None:
    """A module verb's exit code, or None when `argv` is not one."""
    if not argv or argv[0] not in (*MODULE_VERBS, "bench"):
        return None
    verb, rest = argv[0], argv[1:]
    if verb != "bench":
        return _run_module(MODULE_VERBS[verb][0], rest)
    if not rest or rest[0] not in BENCHES:
        names = "\n".join(f"  {n:22} {h}" for n, (_, h) in BENCHES.items())
        print(
            f"usage: python -m shortfirst_lab bench NAME [ARGS...]\n\nbenchmarks:\n{names}", file=sys.stderr
        )
        return 0 if rest and rest[0] in ("-h", "--help") else 2
    return _run_module(BENCHES[rest[0]][0], rest[1:])


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:  # runs inside the namespaces while a run waits: starts at once
        return _run_module(MODULE_VERBS["probe"][0], argv[1:])
    from .kit import LabError, error_line

    parser = argparse.ArgumentParser(prog="python -m shortfirst_lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")
    for name, (help_, add, fn) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add(p)
        p.set_defaults(func=fn)
    for name, (_, help_) in MODULE_VERBS.items():
        sub.add_parser(name, help=help_, add_help=False)
    sub.add_parser("bench", help="a benchmark: " + ", ".join(BENCHES), add_help=False)
    try:
        rc = _delegate(argv)  # a module verb keeps its own signal handling
        if rc is not None:
            return rc
        a = parser.parse_args(argv)
        # SIGTERM (a job scheduler, `kill`) unwinds like Ctrl-C: the testbed's server, generator
        # and namespaces are torn down and the interrupted run's logs kept, not left running.
        signal.signal(signal.SIGTERM, _interrupt)
        return a.func(a)
    except LabError as e:  # the lab's own errors name what and where in their message
        print(error_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (testbed torn down)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
