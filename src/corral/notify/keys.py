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


class Key:
    """One webhook of one run: its queue, in event order, and where reading has got to."""

    def __init__(self, run: Run, hook: Hook, cursor: Any | None, handled: int):
        self.run = run
        self.hook = hook
        self.cursor = cursor.event_id if cursor is not None else 0
        #: events of the run up to here were read (queued or not wanted)
        self.queued_upto = max(self.cursor, handled)
        #: the last progress event queued (throttling: one per ``hook.progress_interval``)
        self.progress_ts: datetime | None = cursor.progress_ts if cursor is not None else None
        self.queue: deque[Item] = deque()
        self.busy = False  # a try is in flight
        self.due = 0.0  # clock time the head of the queue may be tried
        self.turn = 0  # round-robin among keys that are due together

    @property
    def idle(self) -> bool:
        return not self.queue and not self.busy
