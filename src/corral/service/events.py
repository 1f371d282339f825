"""A run's events (its history: state transitions with reasons, agent events copied from the
node, webhook and budget notes), read after a cursor."""

from __future__ import annotations

from collections.abc import Iterable

from corral.errors import BadInput
from corral.service._store import using
from corral.service.views import EventPage, EventView
from corral.store import Store

#: the most events one call returns
MAX_EVENTS = 1000


def run_events(
    ref: str,
    *,
    after: int = 0,
    types: Iterable[str] | None = None,
    limit: int = 100,
    store: Store | None = None,
) -> EventPage:
    """Up to ``limit`` events of the run named by ``ref`` with an id above ``after``, oldest
    first, only of ``types`` when given (e.g. ``run.state``, ``stage.finished``). Polling
    with the returned ``cursor`` as ``after`` never misses an event."""
    if isinstance(after, bool) or after < 0:
        raise BadInput(f"after must be an event id >= 0, not {after!r}")
    if isinstance(limit, bool) or not 1 <= limit <= MAX_EVENTS:
        raise BadInput(f"limit must be between 1 and {MAX_EVENTS}, not {limit!r}")
    wanted = None if types is None else list(types)
    for t in wanted or []:
        if not t or not t.strip() or t != t.strip():
            raise BadInput(f"event type {t!r}: expected a name such as run.state")
    with using(store) as st:
        run = st.get_run(ref)
        found = st.events(run.id, after_id=after, types=wanted, limit=limit)
    events = [EventView.of(e) for e in found]
    return EventPage(run_id=run.id, events=events, cursor=events[-1].id if events else after)
