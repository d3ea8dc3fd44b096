"""A stand-in for `shortfirst sim` (only `sim --trace F --policy P --link-rate R --out DIR`): one ideal
link of rate R serving the trace first come, first served, whatever the policy. Writes
`requests.csv` as the simulator does, numbered in trace order, but in reverse order of rows
(so a reader must go by `id`, not position), and `summary.json` with the policy it was given.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

COLUMNS = ["id", "client", "path", "size_bytes", "bytes_received", "status", "outcome", "attempts",
           "scheduled_s", "start_s", "connected_s", "first_byte_s", "done_s"]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["sim"])
    for k in ("--trace", "--policy", "--link-rate", "--out"):
        p.add_argument(k, required=True)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(a.trace, newline="") as f:
        jobs = [(float(r["time_s"]), r["path"], int(r["size_bytes"])) for r in csv.DictReader(f)]
    rows, free = [], 0.0
    for i, (t, path, size) in enumerate(jobs):
        done = max(t, free) + size * 8 / float(a.link_rate)
        free = done
        rows.append([i, 0, path, size, size, 200, "ok", 1, t, t, t, t, f"{done:.9f}"])
    with open(out / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(reversed(rows))
    (out / "summary.json").write_text(json.dumps({"policy": a.policy, "jobs": len(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
