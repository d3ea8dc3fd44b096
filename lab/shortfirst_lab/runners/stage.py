"""Where a run's files live while it runs, and a docroot made ready for runs.

While a run is going on its raw logs are written to a staging directory in RAM (``/dev/shm``;
``SHORTFIRST_LAB_STAGE`` names another, empty for none) and moved into ``runs/<run>`` when it
ends: a generator or server that appends to a file on a busy disk blocks in the filesystem's
journal for seconds at a time, and the run measures the disk instead of the policy. The stage
holds one run's logs at a time (about 150 B per request: 1 M requests ≈ 150 MB of RAM).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..kit import LabError, write_atomic


class StageError(LabError, RuntimeError):
    """A stage directory that cannot be used, or a docroot too large to prepare."""


#: Where runs stage their raw logs when SHORTFIRST_LAB_STAGE is not set.
DEFAULT_STAGE_ROOT = Path("/dev/shm")
#: Text files whose contents name the run directory (commands, the generator's last line).
STAGE_PATH_FILES = ("commands.txt", "load.log")


def stage_root() -> Path | None:
    """The directory runs stage their logs in, or None to write them in place."""
    env = os.environ.get("SHORTFIRST_LAB_STAGE")
    if env is not None:
        return Path(env) if env else None
    root = DEFAULT_STAGE_ROOT
    return root if root.is_dir() and os.access(root, os.W_OK) else None


def make_stage(run_id: str) -> Path | None:
    """A fresh, empty staging directory for ``run_id`` (None: no stage is available)."""
    root = stage_root()
    if root is None:
        return None
    if not root.is_dir():
        raise StageError(f"SHORTFIRST_LAB_STAGE={root}: not a directory")
    return Path(tempfile.mkdtemp(prefix=f"shortfirst-{run_id}-", dir=root))


def unstage(stage: Path, final_dir: Path) -> None:
    """Moves everything in ``stage`` into ``final_dir`` and removes ``stage``; the run's own
    paths in STAGE_PATH_FILES are rewritten to ``final_dir`` so its commands can be rerun."""
    for name in STAGE_PATH_FILES:
        f = stage / name
        if f.is_file():
            write_atomic(f, f.read_text(errors="replace").replace(str(stage), str(final_dir)))
    for entry in sorted(stage.iterdir()):
        shutil.move(str(entry), str(final_dir / entry.name))
    stage.rmdir()


#: Limit on the files :func:`touch_docroot` reads (a docroot is the workload's, thousands of files).
MAX_TOUCH_FILES = 1_000_000


def touch_docroot(docroot: Path) -> int:
    """Reads one byte of every file under ``docroot`` before any run; returns how many.

    Under ``relatime`` the first read of a file since it was written updates its access time, a
    journalled inode write: while other jobs fill the disk's journal, that write blocked a
    server for 20-30 s in the middle of a run (a file first requested mid-run). Read once here,
    no file's access time is written again for a day. Stops at MAX_TOUCH_FILES with an error.
    """
    n = 0
    for f in docroot.rglob("*"):
        if not f.is_file():
            continue
        n += 1
        if n > MAX_TOUCH_FILES:
            raise StageError(f"{docroot}: more than {MAX_TOUCH_FILES} files")
        with open(f, "rb") as fh:
            fh.read(1)
    return n
