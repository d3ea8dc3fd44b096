"""The binary's vocabulary as the lab uses it, written once: the policies and schedulers of
`shortfirst serve`, the policies of `shortfirst sim`, the gatekeeper's policies and cost
bases. Copied from the binary's sources (crates/cli, crates/core) because the binary prints
no list of them yet; every check and builder of the lab imports them from here, so reading
them from the binary later is one change.
"""

from __future__ import annotations

import re

#: `serve --policy` under the kernel's priority bands (`--scheduler kernel`).
SERVE_POLICIES = ("fair", "srpt", "srpt2", "srrt")
#: Who orders the uplink's bytes (`serve --scheduler`): kernel priority bands under the HTB tree,
#: the server's own pacer under a plain token bucket, or that pacer with Crovella 1999's limit
#: on how many responses may write at once.
SCHEDULERS = ("kernel", "user", "crovella")
#: Policies a user-space scheduler ranks by: `serve` refuses srpt2 (learned cutoffs) and srrt
#: (kernel bands by TCP_INFO) with them, and runs las (least attained service) with them only.
USER_POLICIES = ("fair", "srpt", "las")
#: What `serve` does at `--max-connections` (`--at-max-connections`): refuse = accept and answer
#: 503; wait = stop accepting until a connection closes (the accept queue, then SYN drops).
AT_MAX_CONNECTIONS = ("refuse", "wait")
#: Highest `serve --uplink-rate` (the pacer's limit, crates/server config.rs).
MAX_PACER_RATE_BITS_PER_S = 400_000_000_000
#: `shortfirst sim --policy`: the size-ranking policies, and las.
SIM_POLICIES = ("fair", "srpt", "srpt2", "las")
#: `shortfirst gatekeeper --policy`: fifo, sjf, or sjf-aging:X (X a number).
GATEKEEPER_POLICY = re.compile(r"^(fifo|sjf|sjf-aging:[0-9]*\.?[0-9]+)$")
GATEKEEPER_POLICY_FORM = "fifo, sjf or sjf-aging:X"
#: `shortfirst gatekeeper --estimate-basis`: what a completion's cost sample measures.
ESTIMATE_BASES = ("share", "wall", "serial")
