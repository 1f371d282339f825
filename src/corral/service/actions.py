"""Acting on a run: ask the controller to stop or cancel it, wait for its end."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral.errors import BadInput
from corral.service._store import using
from corral.service.controller import ControllerGuard, Notify, ensure_controller
from corral.service.run_view import RunView
from corral.store import Store
from corral.store.states import Action


def request(
    ref: str,
    action: Action | str,
    *,
    wait: bool = False,
    timeout_s: float | None = None,
    store: Store | None = None,
) -> RunView:
    """Record a ``stop`` (graceful: stages get SIGTERM and the grace period; the run ends
    STOPPED, reason ``user``) or ``cancel`` (terminate now; CANCELLED) request for the run
    and make sure a controller acts on it. With ``wait``, return once the run ended (or
    ``timeout_s`` passed). Conflict when the run already ended."""
    if action not in {a.value for a in Action}:
        raise BadInput(f"action {action!r}: expected one of {', '.join(sorted(Action))}")
    with using(store) as st:
        run = st.request_action(st.get_run(ref).id, str(action))
        ensure_controller(wait_s=5.0)
        if wait:
            return wait_for_end(run.id, timeout_s=timeout_s, store=st)
        return RunView.of(run)


def stop_run(ref: str, **kw: Any) -> RunView:
    """Graceful stop; see :func:`request`."""
    return request(ref, Action.STOP, **kw)


def cancel_run(ref: str, **kw: Any) -> RunView:
    """Cancel at once; see :func:`request`."""
    return request(ref, Action.CANCEL, **kw)


def wait_for_end(
    ref: str,
    *,
    timeout_s: float | None = None,
    poll_s: float = 0.25,
    store: Store | None = None,
    notify: Notify | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RunView:
    """Poll the run until it has ended and return it; after ``timeout_s`` return it as it
    is. Meanwhile a controller that died is started again (``notify`` is told)."""
    if timeout_s is not None and timeout_s < 0:
        raise BadInput(f"timeout must be >= 0 seconds, not {timeout_s!r}")
    if poll_s <= 0:
        raise BadInput(f"poll interval must be > 0 seconds, not {poll_s!r}")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    guard = ControllerGuard(notify)
    with using(store) as st:
        run_id = st.get_run(ref).id
        while True:
            run = st.get_run(run_id)
            if run.terminal or (deadline is not None and time.monotonic() > deadline):
                return RunView.of(run)
            guard.check(run.terminal)
            sleep(poll_s)
