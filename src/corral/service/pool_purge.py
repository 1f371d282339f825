"""``corral pool purge QUEUE``: cancel the runs waiting in one of the pool's queues (the Celery
guide's ``purge``), leaving the running ones alone.

A waiting run is one whose current attempt sits queued in the pool (no worker took it yet).
Each is cancelled as ``corral cancel`` would (the controller then revokes its task and drops
its record), so the store, the broker and the runs' events agree; nothing is deleted from
the broker behind corral's back. Attempts a worker holds are counted, never touched.
"""

from __future__ import annotations

from corral.errors import BadInput, Conflict
from corral.queue.attempts import HELD, QUEUED, AttemptStore, PoolAttempt
from corral.queue.client import broker_errors, connect
from corral.queue.keys import Keys
from corral.queue.registry import Registry
from corral.queue.settings import PoolSettings
from corral.service._store import using
from corral.service.views import View
from corral.store import Store


class PurgeView(View):
    queue: str
    #: the runs cancelled (their attempts were waiting)
    cancelled: list[str]
    #: attempts of the queue a worker holds: left alone
    running: int


def _attempts(settings: PoolSettings, queue: str) -> list[PoolAttempt]:
    """The queue's attempt records; BadInput for a queue the pool does not know."""
    with broker_errors(settings):
        client = connect(settings)
        keys = Keys(settings.name)
        known = {q.queue for q in Registry(client, keys).queues()}
        store = AttemptStore(client, keys)
        prefix = keys.attempt("")
        found = []
        for name in client.scan_iter(match=prefix + "*", count=500):
            rec = store.get(name[len(prefix) :])
            if rec is not None:
                known.add(rec.queue)
                if rec.queue == queue:
                    found.append(rec)
    if queue not in known:
        shown = ", ".join(sorted(known)) or "none yet"
        raise BadInput(f"queue {queue!r}: the pool {settings.name!r} has no such queue ({shown})")
    return found


def waiting_runs(settings: PoolSettings, queue: str) -> tuple[list[str], int]:
    """(the runs waiting in ``queue``, how many of its attempts a worker holds)."""
    records = _attempts(settings, queue)
    waiting = sorted({r.run_id for r in records if r.state == QUEUED and r.run_id})
    return waiting, sum(1 for r in records if r.state in HELD)


def purge(settings: PoolSettings, queue: str, *, store: Store | None = None) -> PurgeView:
    """Cancel every run waiting in ``queue``."""
    waiting, running = waiting_runs(settings, queue)
    cancelled = []
    with using(store) as st:
        for run_id in waiting:
            try:
                st.request_action(run_id, "cancel")
            except Conflict:  # it ended meanwhile
                continue
            st.add_event(run_id, "pool.purged", f"cancelled: queue {queue} purged")
            cancelled.append(run_id)
    if cancelled:
        from corral.service.controller import ensure_controller

        ensure_controller(wait_s=0)
    return PurgeView(queue=queue, cancelled=cancelled, running=running)
