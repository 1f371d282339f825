"""Runs: list them, show one in detail, ask the controller to stop or cancel one, wait for
the end of one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError

from corral import paths
from corral.control.plan_builder import checkpoint_dir
from corral.errors import BadInput, CorralError, NotFound
from corral.service._store import using
from corral.service.controller import ControllerGuard, Notify, ensure_controller
from corral.service.views import AttemptView, RunDetails, RunView
from corral.spec import JobSpec
from corral.store import AttemptRecord, RunRecord, Store
from corral.store.states import RUN_STATES, Action

#: What ``get_run`` says when there is no run at all.
NO_RUNS = "no runs yet: start one with `corral launch corral.yaml`"


def _states(states: Iterable[str] | None) -> list[str] | None:
    """Upper-cased states, each checked (BadInput naming the first unknown one)."""
    wanted = [s.upper() for s in states or []]
    for s in wanted:
        if s not in RUN_STATES:
            raise BadInput(f"state {s!r}: expected one of {', '.join(sorted(RUN_STATES))}")
    return wanted or None


def _count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value < 0):
        raise BadInput(f"{name} must be a whole number >= 0, not {value!r}")


def list_runs(
    *,
    states: Iterable[str] | None = None,
    active_only: bool = False,
    limit: int | None = None,
    offset: int = 0,
    store: Store | None = None,
) -> list[RunView]:
    """Runs newest first: those in ``states`` (any case; default all), only unfinished ones
    with ``active_only``, skipping ``offset`` and at most ``limit`` of them."""
    wanted = _states(states)
    _count("limit", limit)
    _count("offset", offset)
    with using(store) as st:
        upto = None if limit is None else offset + limit
        runs = st.list_runs(states=wanted, active_only=active_only, limit=upto)
    return [RunView.of(r) for r in runs[offset:]]


def _agent_status(store: Store, run: RunRecord) -> dict[str, Any]:
    """The agent's last status as the controller cached it on the current attempt."""
    attempt = current_attempt(store, run)
    return dict(((attempt.data if attempt else None) or {}).get("status") or {})


def current_attempt(store: Store, run: RunRecord | RunView) -> AttemptRecord | None:
    """The run's current attempt (None before its first one or when it cannot be read)."""
    if not run.attempt:
        return None
    try:
        return store.get_attempt(run.id, run.attempt)
    except CorralError:
        return None


def snapshot(ref: str, *, store: Store | None = None) -> tuple[RunView, AttemptRecord | None]:
    """The run and its current attempt (whose ``data["status"]`` is the agent's last status
    as the controller cached it), for a caller that polls a run it watches."""
    with using(store) as st:
        run = st.get_run(ref)
        return RunView.of(run), current_attempt(st, run)


def _checkpoint_dir(run: RunRecord) -> str | None:
    """Where the run keeps its checkpoints; None without a valid spec."""
    if not run.spec:
        return None
    try:
        return checkpoint_dir(JobSpec.model_validate(run.spec), run.id)
    except (ValidationError, CorralError, ValueError):
        return None


def details(store: Store, run: RunRecord) -> RunDetails:
    """``run`` (a record read from ``store``) in detail."""
    agent = _agent_status(store, run)
    return RunDetails(
        **RunView.fields_of(run),
        attempts=[AttemptView.of(a) for a in store.attempts(run.id)],
        stages=list(agent.get("stages") or []),
        acceptance=agent.get("acceptance"),
        manifest=agent.get("manifest"),
        checkpoint_sync=agent.get("checkpoint_sync"),
        logs_dir=str(paths.home() / "runs" / run.id / "logs"),
        checkpoint_dir=_checkpoint_dir(run),
    )


def get_run(ref: str | None = None, *, store: Store | None = None) -> RunDetails:
    """The run named by ``ref`` (id, id prefix or name; default: the newest run) with its
    attempts, its stage table and cost, its acceptance verdict and manifest."""
    with using(store) as st:
        if ref:
            run = st.get_run(ref)
        else:
            newest = st.list_runs(limit=1)
            if not newest:
                raise NotFound(NO_RUNS)
            run = st.get_run(newest[0].id)
        return details(st, run)


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
