#!/usr/bin/env python3
"""make bench-gatekeeper-synthetic / bench-gatekeeper-overhead: the entry point.

The bench is the lab package's shortfirst_lab.gkbench (see its cli module for what it
measures); run with the venv's python, as the Makefile does.
"""

from shortfirst_lab.gkbench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
