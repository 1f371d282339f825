"""Many followers of one run's logs, one reader: the HTTP server's live log streams.

A :class:`LogHub` keeps, for each run being followed, one thread that polls the run (is it
over?) and its copied stage logs every ``poll_s`` seconds and hands the new lines to every
:class:`Subscription` of that run. Following costs the same for 1 follower as for 100; what
each follower adds is only the sending of its lines.

A subscriber that joins gets first the lines written before it joined (unless ``from_end``),
read up to the offsets the hub has reached, so that no line comes twice or goes missing, then
everything the hub reads next. The hub's thread stops when the run has ended (after one last
read: the controller copies the last lines before the end state) or when its last subscriber
has left; the next subscriber starts a new one.

The service stays synchronous: a subscription calls ``notify()`` (from the hub's thread)
whenever it has something new, and its owner takes it with :meth:`Subscription.drain`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from corral.service.logs import LogTailer, open_logs, parse_log
from corral.service.run_view import RunView
from corral.service.runs import snapshot
from corral.service.views import LogLine
from corral.store import Store

log = logging.getLogger(__name__)

#: seconds between two reads of a followed run
POLL_S = 0.25
#: lines a subscription may hold undelivered before it is dropped (a follower far too slow)
MAX_PENDING = 100_000


class Subscription:
    """One follower of a run's logs (of some stages only, if asked)."""

    def __init__(self, feed: _RunFeed, stages: Iterable[str] | None, notify: Callable[[], None]):
        self.run_id = feed.run_id
        self._feed = feed
        self._stages = set(stages) if stages else None
        self._notify = notify
        self._lock = threading.Lock()
        self._pending: list[LogLine] = []
        self._end: RunView | None = None
        #: the follower fell more than MAX_PENDING lines behind and was dropped
        self.overflowed = False

    def drain(self) -> tuple[list[LogLine], RunView | None]:
        """The lines read since the last call (the history first), and the run once it has
        ended, after its last lines: the subscription is over then."""
        with self._lock:
            lines, self._pending = self._pending, []
            return lines, self._end

    def close(self) -> None:
        """Leave the feed (its thread stops when no follower is left)."""
        self._feed.leave(self)

    def _push(self, lines: list[LogLine], end: RunView | None) -> bool:
        """Hand over lines (and the end); False once the follower is dropped."""
        with self._lock:
            self._pending += [x for x in lines if self._stages is None or x.stage in self._stages]
            if len(self._pending) > MAX_PENDING:
                self.overflowed, self._pending = True, []
            if end is not None:
                self._end = end
        self._notify()
        return not self.overflowed


class _RunFeed:
    """The one reader of a run's logs, shared by its subscriptions."""

    def __init__(self, hub: LogHub, run_id: str, stage_names: list[str]):
        self.hub = hub
        self.run_id = run_id
        # every stage, from the lines already there (the logs end at line ends: the
        # controller copies whole lines)
        self.tailer = LogTailer(run_id, stage_names=stage_names, from_end=True)
        self.subs: list[Subscription] = []
        self.lock = threading.Lock()
        self.done = False
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"logs-{run_id}", daemon=True)

    def history(self) -> list[LogLine]:
        """Every line before the offsets the feed has reached (with its lock held)."""
        out: list[LogLine] = []
        for path in self.tailer.files():
            upto = self.tailer.offsets.get(path, 0)
            if upto <= 0:
                continue
            with open(path, "rb") as f:
                data = f.read(upto)
            out += parse_log(data.decode("utf-8", "replace"), int(path.parent.name[1:]), path.stem)
        out.sort(key=lambda line: (line.attempt, line.ts))
        return out

    def leave(self, sub: Subscription) -> None:
        with self.lock:
            if sub in self.subs:
                self.subs.remove(sub)
            if not self.subs:
                self.wake.set()

    def _publish(self, lines: list[LogLine], end: RunView | None) -> None:
        """With the lock held."""
        self.subs = [sub for sub in self.subs if sub._push(lines, end)]

    def _step(self) -> bool:
        """One read; False when the feed is over (the run ended, or no follower is left)."""
        run, _ = snapshot(self.run_id, store=self.hub.store)
        with self.lock:
            if not self.subs:
                self.done = True
                return False
            lines = self.tailer.read()
            if run.terminal:  # the controller copied the last lines before the end state
                self.done = True
                self._publish(lines + self.tailer.read(), run)
                return False
            if lines:
                self._publish(lines, None)
        return True

    def _run(self) -> None:
        try:
            while self._step():
                self.wake.wait(self.hub.poll_s)
                self.wake.clear()
        except Exception as e:  # the store failed: end every stream rather than hang it
            log.warning("following run %s failed: %s", self.run_id, e)
            with self.lock:
                self.done = True
                for sub in self.subs:
                    sub.overflowed = True
                    sub._notify()
        finally:
            self.hub._forget(self)


class LogHub:
    """The live log feeds of the runs being followed, over one ``store``."""

    def __init__(self, store: Store, *, poll_s: float = POLL_S):
        self.store = store
        self.poll_s = poll_s
        self._feeds: dict[str, _RunFeed] = {}
        self._lock = threading.Lock()

    def subscribe(
        self,
        ref: str,
        *,
        notify: Callable[[], None],
        stages: Iterable[str] | None = None,
        from_end: bool = False,
    ) -> Subscription:
        """Follow the run named by ``ref`` (NotFound for no such run or stage, as
        :func:`corral.service.logs.open_logs`). ``notify`` is called, from another thread,
        whenever :meth:`Subscription.drain` has something new: at once when there is history."""
        wanted = list(stages or [])
        found = open_logs(ref, stages=wanted, store=self.store)  # checks the run and stages
        with self._lock:
            feed = self._feeds.get(found.run_id)
            start = False
            if feed is None or feed.done:
                feed = _RunFeed(self, found.run_id, found.stage_names)
                self._feeds[found.run_id] = feed
                start = True
            with feed.lock:
                if feed.done:  # it ended between the lookup and now: a new one
                    feed = _RunFeed(self, found.run_id, found.stage_names)
                    self._feeds[found.run_id] = feed
                    start = True
                sub = Subscription(feed, wanted or None, notify)
                if not from_end:
                    sub._push(feed.history(), None)
                feed.subs.append(sub)
            if start:
                feed.thread.start()
        return sub

    def _forget(self, feed: _RunFeed) -> None:
        with self._lock:
            if self._feeds.get(feed.run_id) is feed:
                del self._feeds[feed.run_id]

    def following(self) -> dict[str, int]:
        """The runs being followed now and how many follow each."""
        with self._lock:
            return {run_id: len(f.subs) for run_id, f in self._feeds.items() if not f.done}
