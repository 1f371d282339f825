"""Durable progress of the webhook dispatcher (``corral.notify``).

Two small tables make delivery at-least-once across controller restarts:

* ``webhook_cursors``: per (run, webhook), the id of the last event of the run that was
  delivered or given up on, with counters and the time of the last progress event sent.
* ``event_positions``: how far a consumer of the global event feed has handled it (every event
  up to ``event_id``); a restarted dispatcher scans from there.

Both only move forward: a late or repeated write of an older position changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral.errors import StoreError
from corral.store._core import StoreBase, aware_utc, select_list
from corral.store.db import Tx
from corral.store.records import (
    EVENT_POSITION_COLUMNS,
    WEBHOOK_CURSOR_COLUMNS,
    EventPositionRecord,
    WebhookCursorRecord,
)

_CURSORS = f"SELECT {select_list(WEBHOOK_CURSOR_COLUMNS)} FROM webhook_cursors"
_POSITIONS = f"SELECT {select_list(EVENT_POSITION_COLUMNS)} FROM event_positions"
_CURSOR_KEY = "run_id = :run_id AND webhook = :webhook"


class WebhookOps(StoreBase):
    def webhook_cursors(self, run_id: str) -> list[WebhookCursorRecord]:
        """The run's webhook cursors by webhook index (a webhook with no row has sent nothing)."""
        with self._db.transaction() as tx:
            return self._records(
                tx,
                "webhook_cursors",
                WebhookCursorRecord,
                f"{_CURSORS} WHERE run_id = :run_id ORDER BY webhook",
                {"run_id": run_id},
            )

    def advance_webhook_cursor(
        self,
        run_id: str,
        webhook: int,
        event_id: int,
        *,
        delivered: int = 0,
        failed: int = 0,
        progress_ts: datetime | None = None,
        progress_stage: str | None = None,
    ) -> WebhookCursorRecord:
        """Record that the run's events up to ``event_id`` went out to webhook ``webhook``
        (``delivered``/``failed``: how many of them were delivered or given up on;
        ``progress_ts``: the event time of a progress event among them, of stage
        ``progress_stage`` when it names one). Forward only: if the
        cursor is already at or past ``event_id``, nothing changes. NotFound for an unknown run.
        """
        if event_id < 0 or webhook < 0:
            raise StoreError("a webhook cursor needs a non-negative webhook index and event id")
        now = self._now()
        key = {"run_id": run_id, "webhook": int(webhook)}
        with self._db.transaction(write=True) as tx:
            self._run_exists(tx, run_id)
            first = {
                **key,
                "event_id": 0,
                "progress_ts": None,
                "progress_stages": None,
                "delivered": 0,
                "failed": 0,
                "updated_at": now,
            }
            self._insert(
                tx, "webhook_cursors", first, unique=("run_id", "webhook"), returning="run_id"
            )
            current = self._cursor_tx(tx, run_id, int(webhook), lock=True)
            if int(event_id) <= current.event_id:
                return current
            values: dict[str, Any] = {
                "event_id": int(event_id),
                "delivered": current.delivered + int(delivered),
                "failed": current.failed + int(failed),
                "updated_at": now,
            }
            if progress_ts is not None:
                ts = aware_utc(progress_ts)
                if current.progress_ts is None or ts > current.progress_ts:
                    values["progress_ts"] = ts
                if progress_stage is not None:
                    stages = dict(current.progress_stages or {})
                    stages[progress_stage] = ts.isoformat()
                    values["progress_stages"] = stages
            self._update(tx, "webhook_cursors", _CURSOR_KEY, key, values)
            return self._cursor_tx(tx, run_id, int(webhook))

    def event_position(self, consumer: str) -> int:
        """How far ``consumer`` has handled the event feed (0 when it never recorded it)."""
        with self._db.transaction() as tx:
            found = self._record(
                tx,
                "event_positions",
                EventPositionRecord,
                f"{_POSITIONS} WHERE consumer = :consumer",
                {"consumer": consumer},
            )
        return found.event_id if found else 0

    def set_event_position(self, consumer: str, event_id: int) -> int:
        """Move ``consumer``'s position forward to ``event_id``; returns the stored position
        (unchanged when it was already further)."""
        now = self._now()
        with self._db.transaction(write=True) as tx:
            first = {"consumer": consumer, "event_id": 0, "updated_at": now}
            self._insert(tx, "event_positions", first, unique=("consumer",), returning="consumer")
            lock = self._db.dialect.for_update
            row = tx.one(
                f"SELECT event_id FROM event_positions WHERE consumer = :consumer{lock}",
                {"consumer": consumer},
            )
            stored = int(row["event_id"]) if row else 0
            if int(event_id) <= stored:
                return stored
            values = {"event_id": int(event_id), "updated_at": now}
            self._update(
                tx, "event_positions", "consumer = :consumer", {"consumer": consumer}, values
            )
            return int(event_id)

    def _cursor_tx(
        self, tx: Tx, run_id: str, webhook: int, lock: bool = False
    ) -> WebhookCursorRecord:
        suffix = self._db.dialect.for_update if lock else ""
        found = self._record(
            tx,
            "webhook_cursors",
            WebhookCursorRecord,
            f"{_CURSORS} WHERE {_CURSOR_KEY}{suffix}",
            {"run_id": run_id, "webhook": webhook},
        )
        if found is None:  # only after a concurrent delete of the run (cascade)
            raise StoreError(f"webhook cursor {run_id}#{webhook} vanished")
        return found
