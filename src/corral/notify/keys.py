"""The dispatcher's memory: runs with webhooks, one queue per (run, webhook), queued items."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.notify.payloads import Hook


@dataclass
class Item:
    """One delivery: an event for one webhook. The body is encoded once and kept, so every
    retry sends the same bytes (with a new timestamp and signature)."""

    event_id: int
    type: str
    payload: dict[str, Any]
    #: the event time of a progress event (saved with the cursor, for throttling)
    progress_ts: datetime | None = None
    #: the stage of a progress event ("" for a progress event that names none)
    progress_stage: str | None = None
    attempts: int = 0
    body: bytes | None = None
    error: str = ""
    #: the delivery id (the X-Corral-Delivery header); "" means the payload's own ``id``
    delivery: str = ""

    @property
    def delivery_id(self) -> str:
        return self.delivery or str(self.payload.get("id") or "")


@dataclass
class Run:
    id: str
    name: str
    finished: bool = False
    #: the newest event of this run the feed scan has seen
    max_event: int = 0
    keys: list[Key] = field(default_factory=list)


def stage_times(cursor: Any | None) -> dict[str, datetime]:
    """The saved per-stage times of a webhook cursor (a cursor from before stages were told
    apart has none: each stage starts unthrottled)."""
    found: dict[str, datetime] = {}
    for stage, text in ((cursor.progress_stages if cursor is not None else None) or {}).items():
        try:
            found[str(stage)] = datetime.fromisoformat(str(text))
        except ValueError:
            continue
    return found


class Key:
    """One webhook of one run: its queue, in event order, and where reading has got to."""

    def __init__(self, run: Run, hook: Hook, cursor: Any | None, handled: int):
        self.run = run
        self.hook = hook
        self.cursor = cursor.event_id if cursor is not None else 0
        #: events of the run up to here were read (queued or not wanted)
        self.queued_upto = max(self.cursor, handled)
        #: per stage, the time of the last progress event queued (throttling: one per
        #: ``hook.progress_interval`` and stage, so parallel stages each get theirs)
        self.progress_ts: dict[str, datetime] = stage_times(cursor)
        self.queue: deque[Item] = deque()
        self.busy = False  # a try is in flight
        self.due = 0.0  # clock time the head of the queue may be tried
        self.turn = 0  # round-robin among keys that are due together

    def progress_due(self, stage: str, ts: datetime) -> bool:
        """Whether a progress event of ``stage`` at ``ts`` goes out (and if so, it is noted as
        the stage's last): the first of its stage, or ``hook.progress_interval`` after it."""
        last = self.progress_ts.get(stage)
        if last is not None and (ts - last).total_seconds() < self.hook.progress_interval:
            return False
        self.progress_ts[stage] = ts
        return True

    @property
    def idle(self) -> bool:
        return not self.queue and not self.busy
