"""Experiment files: one reader (`reader.read_spec`) for every kind, strict everywhere.

`schema` holds what every kind shares (the error naming a file and a key, the field checks),
`tpcw`, `foreign` and `synthetic` the schemas of the gatekeeper experiments; the static serving schema is
`expcheck` (reading) over `expmodel` (the dataclasses), documented in `experiment`. Import the
submodules themselves: this package's `__init__` imports nothing, so a schema module can
import `schema` without importing the reader and every schema with it.
"""
