"""The controller of this ``CORRAL_HOME``: run it in the foreground, start, stop or inspect
the background one, and make sure one babysits the runs while a caller watches them.

The returned values are frozen dataclasses rather than pydantic views: ``corral launch``,
``stop`` and ``cancel`` import this module, and their start-up stays free of model building.
Their ``to_json()`` is what ``corral controller ... --json`` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from corral import paths
from corral.control.daemon import run_foreground, start_background, stop_background
from corral.control.lock import running_pid
from corral.errors import BadInput

#: Seconds between two checks of a :class:`ControllerGuard`.
CONTROLLER_CHECK_S = 3.0

Notify = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ControllerStarted:
    """A background controller runs (just started, or found running and woken)."""

    pid: int
    running: Literal[True] = True

    def to_json(self) -> dict[str, bool | int]:
        return {"running": self.running, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class ControllerStopped:
    """What a stop did: ``stopped`` the controller ``pid``, or found none (``pid`` None)."""

    pid: int | None

    @property
    def stopped(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict[str, bool | int | None]:
        return {"stopped": self.stopped, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    """Whether a controller runs for the ``CORRAL_HOME`` at ``home``, and its pid."""

    pid: int | None
    home: str

    @property
    def running(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict[str, bool | int | str | None]:
        return {"running": self.running, "pid": self.pid, "home": self.home}


def run_controller(
    *,
    idle_exit_s: float | None = None,
    tick_s: float | None = None,
    poll_interval_s: float | None = None,
) -> int:
    """Run the controller in this process until it is stopped (SIGTERM, Ctrl-C) or, with
    ``idle_exit_s``, has had no active run for that long; ``tick_s``: seconds between two
    reads of the active runs, and a busy run's interval; ``poll_interval_s``: a quiet
    running run's interval (defaults: the controller's settings). Returns the exit status
    (0). Conflict if a controller already runs for this home."""
    if poll_interval_s is not None and not 0 < poll_interval_s <= 3600:
        raise BadInput(f"poll interval {poll_interval_s:g}: expected seconds above 0, at most 3600")
    return run_foreground(
        idle_exit_s=idle_exit_s, tick_seconds=tick_s, poll_interval_s=poll_interval_s
    )


def start_controller(*, wait_s: float = 5.0, notify: Notify | None = None) -> ControllerStarted:
    """Start the background controller unless one runs (waiting up to ``wait_s`` for it to
    take the lock; ControllerError if it does not; :func:`ensure_controller` does not wait),
    else wake the running one. One started
    with other settings is restarted, and ``notify`` is told why."""
    if not wait_s > 0:
        raise BadInput(f"wait {wait_s:g}: expected a number of seconds above 0")
    return ControllerStarted(pid=start_background(wait_s=wait_s, notify=notify))


def stop_controller(*, timeout_s: float = 10.0) -> ControllerStopped:
    """Stop the background controller (SIGTERM, then wait up to ``timeout_s``; ControllerError
    if it is still there). Runs keep running: a new controller re-attaches them."""
    if not timeout_s > 0:
        raise BadInput(f"timeout {timeout_s:g}: expected a number of seconds above 0")
    return ControllerStopped(pid=stop_background(timeout_s=timeout_s))


def controller_status() -> ControllerStatus:
    """Whether a controller runs for this ``CORRAL_HOME``."""
    return ControllerStatus(pid=running_pid(), home=str(paths.home()))


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
