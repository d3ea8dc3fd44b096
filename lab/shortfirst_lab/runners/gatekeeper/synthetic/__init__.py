"""The gatekeeper on the synthetic upstream (`make bench-gatekeeper-synthetic`, driven by
python -m shortfirst_lab bench gatekeeper-synthetic): the gatekeeper's policies in front of
`backends.synthetic` under closed and open load at multiples of its peak, and the proxy's
overhead.

Modules, in the order a run goes through them: `points` (one point on the harness's runner:
upstream, proxy, load generator), `models` (calibration and the closed/open runs),
`overhead` (the low-load proxy overhead rounds), `throughput` (the proxy's cost at
saturation), `rules` (the fixed settings and their stated reasons), `verdict` (targets and
table), `cli` (options, output).
"""

from ..summary import summarize
from ..timeline import timeline_summary
from .rules import max_charge_share_spec, max_queue_wait_rule, max_queue_wait_spec

__all__ = [
    "max_charge_share_spec",
    "max_queue_wait_rule",
    "max_queue_wait_spec",
    "summarize",
    "timeline_summary",
]
