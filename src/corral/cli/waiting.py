"""Waiting for a run to end without streaming (``--wait``), and keeping a controller alive
while a CLI waits on a run (a controller killed meanwhile is started again)."""

from __future__ import annotations

import time
from typing import Any

CONTROLLER_CHECK_S = 3.0


class ControllerGuard:
    """Every few seconds, make sure a controller babysits the run being watched."""

    def __init__(self, notify: Any = None):
        self._next = time.monotonic() + CONTROLLER_CHECK_S
        self._notify = notify

    def check(self, run: Any) -> None:
        if run.terminal or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + CONTROLLER_CHECK_S
        from corral.control.daemon import start_background
        from corral.control.lock import running_pid

        if running_pid() is None:
            if self._notify:
                self._notify("no controller is running: starting one")
            start_background(wait_s=0)


def wait_for_end(
    store: Any, run_id: str, *, poll_s: float = 0.25, timeout_s: float | None = None
) -> Any:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    guard = ControllerGuard()
    while True:
        run = store.get_run(run_id)
        if run.terminal:
            return run
        if deadline is not None and time.monotonic() > deadline:
            return run
        guard.check(run)
        time.sleep(poll_s)
