"""Waking the controller, and asking it to look at one run now.

A CLI wakes the controller of its home with SIGUSR1 (the loop reads the active runs at once:
a launch, a stop or cancel request). A run whose state the store does not show changing
(a machine preempted by hand, say) is *nudged*: an empty file named for the run under
``CORRAL_HOME/nudges/``, then the wake-up; the loop takes the files at each read of the
active runs and looks at those runs at once instead of at their scheduled look. A controller
that is not running finds the files when it starts. The controller ignores SIGUSR1 from the
moment it holds its lock until its loop handles it (``daemon.run_foreground``), so a wake-up
never kills one that is starting.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from corral import paths
from corral.control.lock import running_pid

#: the folder of ``CORRAL_HOME`` that holds the nudges
NUDGE_DIR = "nudges"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def wake(pid: int) -> None:
    """SIGUSR1 to the controller ``pid``: read the active runs now."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except (ProcessLookupError, PermissionError):
        pass


def nudge(run_id: str, home: Path | None = None) -> None:
    """Ask the controller of ``home`` to look at ``run_id`` now. Never raises: a nudge that
    cannot be written leaves the run to its scheduled look."""
    if not _RUN_ID.match(run_id):
        return
    home = home or paths.home()
    try:
        folder = home / NUDGE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        (folder / run_id).touch()
    except OSError:
        return
    pid = running_pid(home)
    if pid and pid > 0:
        wake(pid)


def take_nudges(home: Path) -> list[str]:
    """The run ids nudged since the last call (their files are removed)."""
    folder = home / NUDGE_DIR
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return []
    taken = []
    for name in names:
        try:
            (folder / name).unlink()
        except OSError:
            continue  # another reader took it
        taken.append(name)
    return taken
