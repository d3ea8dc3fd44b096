"""The gatekeeper's synthetic benchmark (`make bench-gatekeeper-synthetic`, driven by
python -m shortfirst_lab bench gatekeeper-synthetic): the synthetic TPC-W-like upstream, the
gatekeeper's policies in front of it under closed and open load, and the proxy's overhead.

Modules, in the order a run goes through them: `workload` (the request types and traces),
`harness` (start upstream, proxy, load generator; one point), `timeline` (metrics scraped
and sampled during a point), `summary` (a point's figures), `models` (calibration and the
closed/open runs), `overhead` (the low-load proxy overhead rounds), `rules` (the fixed
settings and their stated reasons), `verdict` (targets and table), `cli` (options, output).

It lives in the lab package, not beside the crate, so that it imports the shared kit and
is imported by the lab's tests like any other module; the file beside the crate is the
entry point `make` runs.
"""

from .rules import max_charge_share_spec, max_queue_wait_rule, max_queue_wait_spec
from .summary import summarize
from .timeline import timeline_summary

__all__ = [
    "max_charge_share_spec",
    "max_queue_wait_rule",
    "max_queue_wait_spec",
    "summarize",
    "timeline_summary",
]
