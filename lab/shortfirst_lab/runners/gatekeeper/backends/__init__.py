"""The backends the gatekeeper goes in front of, each an implementation of `base.Backend`:
`synthetic` (the synthetic TPC-W-like upstream), `foreign` (datasette, json-server) and
`bookstore` (the TPC-W bookstore, over the private PostgreSQL of `postgres`).
"""
