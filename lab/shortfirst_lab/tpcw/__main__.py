"""``python -m shortfirst_lab.tpcw``: see ``cli``."""

from .cli import main

raise SystemExit(main())
