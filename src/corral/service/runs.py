"""Runs as listed: the runs in the store (filtered, paged) and one run's live snapshot.
Kept light (the store and the views only): ``corral ls`` imports it."""

from __future__ import annotations

from collections.abc import Iterable

from corral.errors import BadInput, CorralError
from corral.service._store import using
from corral.service.run_view import RunView
from corral.store import AttemptRecord, RunRecord, Store
from corral.store.states import RUN_STATES


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
