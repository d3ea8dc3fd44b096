"""From raw logs to figures, tables and pages: every metric (`metrics`), the ideals a run is
compared with (`models`, `wire`, `idealsim`), the comparisons (`policycmp`, `srrtmetrics`,
`inflight`, `series`) and the pages (`report`, `figures`, `policytables`, `wanreport`,
`overload`, `overloadfigs`, `browsercheck`). Reads experiment directories and the spec; never
imports the testbed or the runners (lab/tests/test_layers.py checks).
"""
