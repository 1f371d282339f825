"""The webhook dispatcher: the store's event feed in, signed POSTs out, at least once, in order.

``tick()`` reads new events from the store (``events(after_id=...)``, the global feed), finds
the runs with webhooks and queues one delivery per event a webhook wants. It only reads the
store and fills memory queues, so it is quick and never waits on a receiver. Sender threads
(``start()``) take the queues: one delivery at a time per (run, webhook), so each receiver
sees a run's events in order, while other webhooks go on through the other threads. A failed
try is retried later with backoff (the key waits, no thread sleeps).

Durability (see ``docs/webhooks.md``):

* per (run, webhook) a cursor in the store: the last event delivered or given up on;
* the feed position (``event_positions["webhooks"]``): every event up to it is handled
  (delivered, given up on, or not wanted). A restart scans from there and skips what the
  cursors say went out, so a receiver sees at most the in-flight delivery again.

Which events are skipped (not subscribed, progress of a stage too soon after that stage's
last) depends only on the events and the cursor's ``progress_stages``, so replaying after a
restart decides the same way.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from corral import __version__
from corral.notify import payloads, sending
from corral.notify.feed import FeedReader
from corral.notify.keys import Item, Key, Run
from corral.notify.signing import (
    HEADER_ATTEMPT,
    HEADER_DELIVERY,
    HEADER_EVENT,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    sign,
)

log = logging.getLogger("corral.notify")

USER_AGENT = f"corral-webhooks/{__version__}"


def stored_secret(name: str) -> str | None:
    """The default secret resolver: the secret store, then the environment
    (:func:`corral.secrets.resolve`)."""
    from corral.secrets import resolve

    return resolve(name)


class Dispatcher(FeedReader):
    """Deliver the webhooks of every run in ``store``.

    ``http``: an ``httpx.Client`` to send with (default: one of its own); ``clock``: unix
    seconds, for the signature timestamp and retry times; ``secret_resolver(name)``: a secret's
    value or None; ``policy``: retries and timeout; ``workers``: sender threads;
    ``queue_size``: deliveries held in memory per (run, webhook) (more wait in the store);
    ``poll_interval``: seconds between ticks of the background thread; ``page_size`` and
    ``max_pages``: events read from the feed per query and per tick; ``lease``: with several
    controllers on one store, whether this one delivers now (it holds the feed's lease): a
    dispatcher without it forgets what it queued and starts again from the store's position
    and cursors when it gets the lease, so each event goes out from one controller.
    """

    def __init__(
        self,
        store: Any,
        *,
        http: Any | None = None,
        clock: Callable[[], float] = time.time,
        secret_resolver: Callable[[str], str | None] = stored_secret,
        policy: sending.RetryPolicy | None = None,
        workers: int = 4,
        queue_size: int = 100,
        poll_interval: float = 1.0,
        page_size: int = 500,
        max_pages: int = 20,
        rng: random.Random | None = None,
        lease: Callable[[], bool] | None = None,
    ):
        self.store = store
        self.lease = lease
        self.clock = clock
        self.secret_resolver = secret_resolver
        self.policy = policy or sending.RetryPolicy()
        self.workers = max(1, int(workers))
        self.queue_size = max(1, int(queue_size))
        self.poll_interval = poll_interval
        self.page_size = page_size
        self.max_pages = max(1, int(max_pages))
        self._http = http
        self._own_http = http is None
        self._rng = rng or random.Random()
        self._runs: dict[str, Run] = {}
        self._plain: set[str] = set()  # runs without webhooks
        self._scan: int | None = None  # feed position read so far
        self._saved = 0  # feed position last written to the store
        self._turn = 0
        self._tick_lock = threading.Lock()
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._secret_noted: set[tuple[str, int]] = set()

    # --- public ------------------------------------------------------------------------------

    def start(self) -> Dispatcher:
        """Start the ticking thread and the sender threads (idempotent); returns self."""
        if self._threads:
            return self
        self._stopping.clear()
        self._threads = [threading.Thread(target=self._tick_loop, name="webhooks-tick")]
        self._threads += [
            threading.Thread(target=self._send_loop, name=f"webhooks-send-{i}")
            for i in range(self.workers)
        ]
        for t in self._threads:
            t.daemon = True
            t.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads (a request in flight is given up to ``timeout`` to finish).
        What is still queued goes out after the next start: the cursors are in the store."""
        self._stopping.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        alive = False
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            alive = alive or t.is_alive()
        self._threads = []
        if self._own_http and self._http is not None and not alive:
            self._http.close()
            self._http = None

    def wake(self) -> None:
        """Tick now rather than at the next poll interval."""
        self._wake.set()

    def tick(self) -> int:
        """Queue deliveries for the events written since the last tick; returns how many were
        queued. Never raises (a failure is logged and the next tick tries again)."""
        try:
            with self._tick_lock:
                if not self._leading():
                    return 0
                return self._tick()
        except Exception:
            log.exception("webhook dispatcher tick failed")
            return 0

    def _leading(self) -> bool:
        """Whether this dispatcher delivers now; one that does not forgets its queues."""
        if self.lease is None:
            return True
        try:
            leading = bool(self.lease())
        except Exception as e:  # the store is away: deliver nothing until it is back
            log.warning("webhook dispatcher: cannot check its lease: %s", e)
            leading = False
        if not leading and (self._runs or self._scan is not None):
            with self._cond:
                self._runs.clear()
                self._plain.clear()
                self._scan = None
                self._saved = 0
        return leading

    def run_pending(self, limit: int | None = None) -> int:
        """Make every delivery try that is due now, in the calling thread (tests, and tools
        that do not start threads); returns the number of tries."""
        done = 0
        while limit is None or done < limit:
            with self._cond:
                claim = self._claim(self.clock())
            if claim is None:
                return done
            self._try(*claim)
            done += 1
        return done

    def pending(self) -> int:
        """Deliveries queued in memory (including those waiting for a retry)."""
        with self._cond:
            return sum(len(k.queue) for r in self._runs.values() for k in r.keys)

    # --- sending -----------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        while not self._stopping.is_set():
            self.tick()
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _send_loop(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                now = self.clock()
                claim = self._claim(now)
                if claim is None:
                    due = min((k.due for k in self._keys() if k.queue and not k.busy), default=None)
                    wait = 1.0 if due is None else min(1.0, max(0.01, due - now))
                    self._cond.wait(wait)
                    continue
            self._try(*claim)

    def _keys(self) -> list[Key]:
        return [k for r in self._runs.values() for k in r.keys]

    def _claim(self, now: float) -> tuple[Key, Item] | None:
        """The next delivery to try: of the keys with one due and none in flight, the one
        waiting longest (called with the lock held)."""
        ready = [k for k in self._keys() if k.queue and not k.busy and k.due <= now]
        if not ready:
            return None
        key = min(ready, key=lambda k: (k.due, k.turn))
        key.busy = True
        return key, key.queue[0]

    def _try(self, key: Key, item: Item) -> None:
        try:
            self._attempt(key, item)
        except Exception:  # never lose a sender thread or leave the key busy
            log.exception("webhook delivery to %s failed unexpectedly", key.hook.label)
            self._retry_later(key, item, None)

    def _attempt(self, key: Key, item: Item) -> None:
        secret = self._secret(key)
        if secret is False:
            self._done(key, item, delivered=False)
            return
        if item.body is None:
            item.body = payloads.encode(item.payload, secret or None)
        now = self.clock()
        stamp = str(int(now))
        item.attempts += 1
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            HEADER_EVENT: item.type,
            HEADER_DELIVERY: item.delivery_id,
            HEADER_TIMESTAMP: stamp,
            HEADER_ATTEMPT: str(item.attempts),
        }
        if secret:
            headers[HEADER_SIGNATURE] = sign(secret, stamp, item.body)
        outcome = sending.post(
            self._client(), key.hook.url, item.body, headers, timeout=self.policy.timeout, now=now
        )
        if outcome.ok:
            self._done(key, item, delivered=True)
        elif outcome.retry and item.attempts < self.policy.max_attempts:
            item.error = outcome.error
            self._retry_later(key, item, outcome.retry_after)
        else:
            self._give_up(key, item, outcome.error)

    def _secret(self, key: Key) -> str | Literal[False] | None:
        """The webhook's secret value; None when it has none; False when it names a secret
        that cannot be had (one event per run and webhook; its deliveries are dropped)."""
        name = key.hook.secret
        if not name:
            return None
        try:
            value = self.secret_resolver(name)
        except Exception as e:  # never show what the resolver said: it may hold the value
            log.warning("reading secret %s failed: %s", name, type(e).__name__)
            value = None
        if value:
            return value
        note = (key.run.id, key.hook.index)
        if note not in self._secret_noted:
            self._secret_noted.add(note)
            self._event(
                key.run.id,
                "webhook.error",
                f"{key.hook.label}: secret {name} is not set on the controller; "
                "its events are not sent until it is",
                {"webhook": key.hook.index, "secret": name},
            )
        return False

    def _retry_later(self, key: Key, item: Item, retry_after: float | None) -> None:
        wait = self.policy.delay(item.attempts, self._rng, retry_after)
        with self._cond:
            key.due = self.clock() + wait
            key.busy = False
            self._cond.notify_all()

    def _give_up(self, key: Key, item: Item, error: str) -> None:
        tries = f"{item.attempts} attempt" + ("s" if item.attempts != 1 else "")
        self._event(
            key.run.id,
            "webhook.failed",
            f"{key.hook.label}: gave up on {item.type} after {tries}: {error}",
            {
                "webhook": key.hook.index,
                "event": item.type,
                "event_id": item.event_id,
                "delivery": item.delivery_id,
                "attempts": item.attempts,
                "error": error,
            },
        )
        self._done(key, item, delivered=False)

    def _done(self, key: Key, item: Item, *, delivered: bool) -> None:
        try:
            self.store.advance_webhook_cursor(
                key.run.id,
                key.hook.index,
                item.event_id,
                delivered=int(delivered),
                failed=int(not delivered),
                progress_ts=item.progress_ts,
                progress_stage=item.progress_stage,
            )
        except Exception as e:  # it went out (or was given up on) all the same
            # after stop() the owner may have closed the store: expected, not a warning
            level = logging.INFO if self._stopping.is_set() else logging.WARNING
            log.log(level, "run %s: saving the webhook cursor failed: %s", key.run.id, e)
        with self._cond:
            if key.queue and key.queue[0] is item:
                key.queue.popleft()
            key.busy = False
            key.due = self.clock()
            self._turn += 1
            key.turn = self._turn
            self._cond.notify_all()

    def _event(self, run_id: str, type_: str, reason: str, data: dict[str, Any]) -> None:
        log.warning("run %s: %s", run_id, reason)
        try:
            self.store.add_event(run_id, type_, reason, data=data)
        except Exception as e:
            log.warning("run %s: recording %s failed: %s", run_id, type_, e)

    def _client(self) -> Any:
        if self._http is None:
            import httpx

            self._http = httpx.Client(follow_redirects=False, headers={"User-Agent": USER_AGENT})
        return self._http
