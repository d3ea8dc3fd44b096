"""`python -m shortfirst_lab bench pg EXPERIMENT.toml` (`make bench-pg`): a private PostgreSQL
with pgbench's data, then the overhead experiment and the overload experiment
(`--only` one of them), writing `OUT/summary.json` (with `--only`, the other experiment's
section of an existing summary is kept). Raw logs (pgbench's per-transaction logs, the
proxies' output) stay in the work directory, named in the summary.

With `--pin` (the default when a `python -m shortfirst_lab cpus` reservation exists)
PostgreSQL and the proxies (PgBouncer, the gatekeeper: next to the server, as deployed, unless
the file's `proxy_cpu` puts them with the clients) run on the reserved CPU, pgbench where this
command runs (run it outside the reservation): the
clients' CPU is not the database's, and the proxies' cost samples are not delayed by other
work on the shared CPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ....kit import provenance, shortfirst_binary, write_json
from ....spec.reader import read_spec
from ..backends.postgres import postgres
from ..run import pinned_prefix, reserved_cpus, slice_prefix
from . import overhead, overload, pgbench, verdict
from .arms import Context

EXPERIMENTS = ("overhead", "overload")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m shortfirst_lab bench pg", description=__doc__.splitlines()[0]
    )
    ap.add_argument("experiment", type=Path, help="a pg experiment file (lab/experiments/pg-gatekeeper.toml)")
    ap.add_argument(
        "--bin", type=Path, default=shortfirst_binary(), help="default: $SHORTFIRST_BIN or the release build"
    )
    ap.add_argument("--out", type=Path, required=True, help="directory of summary.json")
    ap.add_argument("--work", type=Path, default=None, help="raw logs (default: a new directory in /tmp)")
    ap.add_argument("--only", choices=EXPERIMENTS, default=None, help="run one experiment")
    ap.add_argument(
        "--pin", choices=("auto", "yes", "no"), default="auto", help="PostgreSQL on the reserved CPU"
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    spec = read_spec(a.experiment, a.overrides, kind="pg").value
    work = a.work or Path(tempfile.mkdtemp(prefix="pg-gatekeeper-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    prefix = pinned_prefix({"auto": None, "yes": True, "no": False}[a.pin])
    summary_path = a.out / "summary.json"
    doc = json.loads(summary_path.read_text()) if a.only and summary_path.exists() else {}
    doc["provenance"] = provenance(
        argv=["python", "-m", "shortfirst_lab", "bench", "pg", *(argv or sys.argv[1:])]
    )
    doc["experiment"] = a.experiment.read_text() if not a.overrides else f"{a.experiment} with {a.overrides}"
    run = [a.only] if a.only else list(EXPERIMENTS)
    clients = max(*spec.overhead.clients, spec.overload.cheap_clients + spec.overload.expensive_clients)
    with postgres(max_connections=spec.max_connections, prefix=prefix) as pg:
        doc["postgres"] = {
            # The proxies run beside it (PgBouncer, the gatekeeper), pgbench where this runs.
            "pinned_to_reserved_cpu": bool(prefix),
            "scale": spec.scale,
            "max_connections": spec.max_connections,
            "proxy_nice": spec.proxy_nice,
            "proxy_slice_us": spec.proxy_slice_us or None,
            "proxy_cpu": spec.proxy_cpu if prefix else None,
            "init_s": pgbench.init(pg.url, spec.scale, work / "init.log"),
        }
        db_cpus = reserved_cpus() if prefix else ()
        # The proxies (PgBouncer, the gatekeeper) beside the database or with the clients, at
        # the file's nice value and scheduler slice.
        proxy_prefix = prefix if spec.proxy_cpu == "database" else []
        proxy_prefix += ["nice", "-n", str(spec.proxy_nice)] if spec.proxy_nice else []
        proxy_prefix += slice_prefix(spec.proxy_slice_us)
        ctx = Context(a.bin, pg.url, work, spec.pool_size, clients, proxy_prefix, db_cpus, pg.postmaster_pid)
        accounts = 100_000 * spec.scale
        for name in run:
            t0, load0 = time.monotonic(), _loadavg()
            section = (overhead if name == "overhead" else overload).run(
                ctx, getattr(spec, name), spec.seed, accounts
            )
            section.update(
                wall_s=time.monotonic() - t0, loadavg_before=load0, loadavg_after=_loadavg(), work=str(work)
            )
            # Each section keeps the run it came from: an `--only` run rewrites the top level.
            section["provenance"] = doc["provenance"]
            section["checks"] = getattr(verdict, name)(section)
            doc[name] = section
            a.out.mkdir(parents=True, exist_ok=True)
            write_json(summary_path, doc)
    for name in run:
        print(f"\n{name}:\n{verdict.table(doc[name]['checks'])}", file=sys.stderr)
    print(f"wrote {summary_path}; raw logs in {work}", file=sys.stderr)
    return 0


def _loadavg() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (others' work on the shared machine)."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
