"""Making sure a background controller babysits the runs of this ``CORRAL_HOME``."""

from __future__ import annotations

import time
from collections.abc import Callable

from corral.control.daemon import start_background
from corral.control.lock import running_pid

#: Seconds between two checks of a :class:`ControllerGuard`.
CONTROLLER_CHECK_S = 3.0

Notify = Callable[[str], None]


def ensure_controller(*, wait_s: float = 0.0, notify: Notify | None = None) -> int:
    """Start the background controller unless one runs (one started with other settings is
    restarted, and ``notify`` is told why); wake it either way. Returns its pid. With
    ``wait_s=0`` a new controller is not waited for."""
    return start_background(wait_s=wait_s, notify=notify)


class ControllerGuard:
    """Used while a caller watches a run: every :data:`CONTROLLER_CHECK_S` seconds, start a
    controller again if the one babysitting the run died (``notify`` is told)."""

    def __init__(
        self, notify: Notify | None = None, *, clock: Callable[[], float] = time.monotonic
    ):
        self._clock = clock
        self._next = clock() + CONTROLLER_CHECK_S
        self._notify = notify

    def check(self, terminal: bool) -> None:
        """Call on each poll of a run; ``terminal``: the run has ended (nothing to guard)."""
        if terminal or self._clock() < self._next:
            return
        self._next = self._clock() + CONTROLLER_CHECK_S
        if running_pid() is None:
            if self._notify:
                self._notify("no controller is running: starting one")
            start_background(wait_s=0)
