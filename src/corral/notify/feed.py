"""Reading the store's event feed into the dispatcher's queues (a mixin of ``Dispatcher``).

The feed is ``store.events(after_id=...)``: every event in commit order. A tick reads what is
new, finds the runs with webhooks (their specs are read once) and queues, per (run, webhook),
the events the webhook wants. A queue that is full stops there; the rest is read again from
the store (by run) once it has room. The position saved in the store is the highest one below
which every event is handled, so a restart never skips an event nor re-reads much.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from corral.notify import formats, payloads
from corral.notify.keys import Item, Key, Run
from corral.store.records import EventRecord
from corral.wire.outcome import AttemptOutcome

log = logging.getLogger("corral.notify")

CONSUMER = "webhooks"


class FeedReader:
    """Scanning state and methods; ``Dispatcher`` sets the attributes below."""

    store: Any
    page_size: int
    max_pages: int
    queue_size: int
    _runs: dict[str, Run]
    _plain: set[str]
    _scan: int | None
    _saved: int
    _cond: threading.Condition

    def _tick(self) -> int:
        if self._scan is None:
            self._scan = self._saved = self.store.event_position(CONSUMER)
        queued = 0
        live: dict[str, Any] = {}
        for _ in range(self.max_pages):  # a large backlog is read over several ticks
            batch = self.store.events(after_id=self._scan, limit=self.page_size)
            if not batch:
                break
            queued += self._take(batch, live)
            if len(batch) < self.page_size:
                break
        for run in list(self._runs.values()):
            for key in run.keys:
                if key.queued_upto < run.max_event and len(key.queue) < self.queue_size:
                    queued += self._catch_up(run, key, live)
        self._forget_finished()
        self._save_position()
        if queued:
            with self._cond:
                self._cond.notify_all()
        return queued

    def _take(self, batch: list[EventRecord], live: dict[str, Any]) -> int:
        before = self._scan or 0
        by_run: dict[str, list[EventRecord]] = {}
        for e in batch:
            by_run.setdefault(e.run_id, []).append(e)
        queued = 0
        for run_id, events in by_run.items():
            run = self._runs.get(run_id) or self._discover(run_id, before)
            if run is None:
                continue
            caught_up = run.max_event
            run.max_event = events[-1].id
            run.finished = run.finished or any(e.type == "run.finished" for e in events)
            for key in run.keys:
                if key.queued_upto >= caught_up:  # nothing of this run left unread before
                    queued += self._feed(run, key, events, live)
        # only now: a failure above (the store) reads the same batch again next tick, and
        # what was queued already is skipped by each key's ``queued_upto``
        self._scan = batch[-1].id
        return queued

    def _discover(self, run_id: str, before: int) -> Run | None:
        if run_id in self._plain:
            return None
        from corral.errors import NotFound

        try:
            record = self.store.get_run(run_id)
        except NotFound:
            return None
        if record.id != run_id:  # get_run also matches prefixes and names
            return None
        hooks = payloads.hooks_of(record.spec)
        if not hooks:
            if len(self._plain) > 50_000:
                self._plain.clear()
            self._plain.add(run_id)
            return None
        cursors = {c.webhook: c for c in self.store.webhook_cursors(run_id)}
        # Events of this run up to ``before`` were all handled already: either they are
        # behind the saved feed position, or this dispatcher saw them and forgot the run only
        # once everything had gone out.
        run = Run(run_id, record.name, finished=record.terminal, max_event=before)
        run.keys = [Key(run, h, cursors.get(h.index), before) for h in hooks]
        with self._cond:
            self._runs[run_id] = run
        return run

    def _catch_up(self, run: Run, key: Key, live: dict[str, Any]) -> int:
        scan = self._scan or 0
        events = self.store.events(run.id, after_id=key.queued_upto, limit=self.page_size)
        return self._feed(run, key, [e for e in events if e.id <= scan], live)

    def _feed(self, run: Run, key: Key, events: list[EventRecord], live: dict[str, Any]) -> int:
        queued = 0
        for e in events:
            if e.id <= key.queued_upto:
                continue
            if len(key.queue) >= self.queue_size:
                break  # read again from the store once the queue has room
            item = self._item(run, key, e, live)
            if item is not None:
                with self._cond:
                    key.queue.append(item)
                queued += 1
            key.queued_upto = e.id
        return queued

    def _item(self, run: Run, key: Key, e: EventRecord, live: dict[str, Any]) -> Item | None:
        if e.type not in payloads.WEBHOOK_EVENTS or not key.hook.wants(e.type):
            return None
        extra = None
        stage = progress_stage(e)
        if stage is not None:
            if not key.progress_due(stage, e.ts):
                return None
            if run.id not in live:
                live[run.id] = self._live(run.id)
            extra = live[run.id]
        payload = payloads.build(
            e, run_name=run.name, webhook=key.hook.index, live=extra, outcome=self._outcome(e)
        )
        delivery = str(payload["id"])
        if key.hook.format != "corral":
            public_url = os.environ.get(formats.ENV_PUBLIC_URL) or None
            payload = formats.convert(payload, key.hook.format, public_url)
        progress_ts = e.ts if stage is not None else None
        return Item(e.id, e.type, payload, progress_ts, stage, delivery=delivery)

    def _outcome(self, e: EventRecord) -> AttemptOutcome | None:
        if e.type not in payloads.OUTCOME_EVENTS:
            return None
        try:
            return payloads.outcome_for(self.store, e)
        except Exception as exc:  # the payload goes out without it rather than not at all
            log.warning("run %s: no outcome for a %s webhook: %s", e.run_id, e.type, exc)
            return None

    def _live(self, run_id: str) -> dict[str, Any]:
        try:
            record = self.store.get_run(run_id)
            attempt = self.store.get_attempt(run_id, record.attempt) if record.attempt else None
        except Exception as e:
            log.warning("run %s: no live status for a progress webhook: %s", run_id, e)
            return {}
        return payloads.live_status(record, attempt)

    def _forget_finished(self) -> None:
        with self._cond:
            for run_id, run in list(self._runs.items()):
                if run.finished and all(
                    k.idle and k.queued_upto >= run.max_event for k in run.keys
                ):
                    del self._runs[run_id]

    def _save_position(self) -> None:
        """Write the feed position below which everything is handled."""
        low = self._scan or 0
        with self._cond:
            for run in self._runs.values():
                for key in run.keys:
                    if key.queue:
                        low = min(low, key.queue[0].event_id - 1)
                    elif key.queued_upto < run.max_event:
                        low = min(low, key.queued_upto)
        if low > self._saved:
            self._saved = self.store.set_event_position(CONSUMER, low)


def progress_stage(e: EventRecord) -> str | None:
    """The stage a progress event reports on ("" when it names none); None for any other
    event. Progress is throttled per stage: parallel stages each reach the webhook."""
    if e.type != "progress":
        return None
    stage = (e.data or {}).get("stage")
    return stage if isinstance(stage, str) else ""
