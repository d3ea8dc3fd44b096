"""shortfirst lab: testbed, experiment runner, analysis, plots, reports and queueing theory.

The lab drives the `shortfirst` binary (server, load generator, simulator) and reads
only the raw per-request logs it writes, so every figure can be rebuilt from them.
"""

__version__ = "0.1.0"
