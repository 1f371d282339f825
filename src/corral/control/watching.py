"""Runs someone follows: their logs and progress are copied at the usual pace.

A belled quiet run (``control.bell``) is pulled rarely: its state changes are rung at once,
but its new log lines and progress records wait for the next pull. While someone reads them as
they come (``corral logs -f``, ``corral status --watch``, the server's log stream), the
reader marks the run: an empty file named for it under ``CORRAL_HOME/following/``, touched at
most every :data:`TOUCH_S`; the controller reads the folder at each read of the active runs
and looks at a run marked within :data:`FOLLOW_S` at its usual pace. Marks older than
:data:`STALE_S` (a reader killed) are removed by the controller.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from corral import paths

FOLLOW_DIR = "following"
#: a reader touches its mark at most this often ...
TOUCH_S = 1.0
#: ... and a mark this fresh keeps its run at the usual pace
FOLLOW_S = 5.0
#: a mark this old is a reader gone
STALE_S = 300.0
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def mark_followed(run_id: str, home: Path | None = None) -> None:
    """Say that ``run_id`` is being followed (never raises: a mark that cannot be written
    only leaves the run at its quiet pace)."""
    if not _RUN_ID.match(run_id):
        return
    folder = (home or paths.home()) / FOLLOW_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / run_id).touch()
    except OSError:
        pass


def followed_runs(home: Path, *, now: float | None = None) -> list[str]:
    """The runs marked within :data:`FOLLOW_S` (stale marks are removed)."""
    now = time.time() if now is None else now
    out: list[str] = []
    try:
        entries = list(os.scandir(home / FOLLOW_DIR))
    except OSError:
        return out
    for entry in entries:
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue
        if age <= FOLLOW_S:
            out.append(entry.name)
        elif age > STALE_S:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    return out
