"""Runs as listed: the runs in the store (filtered, paged) and one run's live snapshot.
Kept light (the store and the views only): ``corral ls`` imports it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from corral.errors import BadInput, CorralError
from corral.service._store import using
from corral.service.run_view import RunView
from corral.store import AttemptRecord, RunRecord, Store
from corral.store.states import RUN_STATES

#: a state as a front door takes it: one of the run states, in any case (a JSON Schema
#: pattern has no flags: each letter is a class of its two cases)
STATE_NAMES = tuple(sorted(RUN_STATES))
STATE_PATTERN = "^({})$".format(
    "|".join(
        "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in s) for s in sorted(RUN_STATES)
    )
)


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


@dataclass(frozen=True)
class RunPage:
    """One page of runs and how many runs match the filters in all."""

    runs: list[RunView]
    #: the runs matching the filters, on this page and off it
    total: int
    offset: int = 0

    @property
    def more(self) -> int:
        """How many matching runs come after this page."""
        return max(0, self.total - self.offset - len(self.runs))


def page_runs(
    *,
    states: Iterable[str] | None = None,
    active_only: bool = False,
    limit: int | None = None,
    offset: int = 0,
    store: Store | None = None,
) -> RunPage:
    """:func:`list_runs` with the number of matching runs (counted only when the page is
    full: a page that is not has them all)."""
    with using(store) as st:
        runs = list_runs(
            states=states, active_only=active_only, limit=limit, offset=offset, store=st
        )
        total = offset + len(runs)
        if limit is not None and len(runs) >= limit:
            total = st.count_runs(states=_states(states), active_only=active_only)
    return RunPage(runs, total, offset)


#: runs read from the store at a time while streaming them
STREAM_BATCH = 500


def iter_runs(
    *,
    states: Iterable[str] | None = None,
    active_only: bool = False,
    batch: int | None = None,
    store: Store | None = None,
) -> Iterator[RunView]:
    """Every matching run, newest first, read ``batch`` at a time (each batch from where the
    last ended, by index; default :data:`STREAM_BATCH`): memory stays flat and the first
    runs come at once, however long the history."""
    wanted = _states(states)
    batch = STREAM_BATCH if batch is None else batch
    if batch < 1:
        raise BadInput(f"batch must be a whole number >= 1, not {batch!r}")
    with using(store) as st:
        last: RunRecord | None = None
        while True:
            page = st.list_runs(states=wanted, active_only=active_only, limit=batch, before=last)
            for run in page:
                yield RunView.of(run)
            if len(page) < batch:
                return
            last = page[-1]


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
