"""What runs an experiment or a benchmark: a static serving experiment (`static`, with
`stage`, `health`, `wanrun`, `factors`), the gatekeeper harness (`gatekeeper`: its backends,
one runner, its experiments) and the lab's own benchmarks and measurements (`netembench`,
`tlsbench`, `downloads`). The only package that imports the testbed; writes raw logs, leaves metrics to
`analysis`.
"""
