"""The supervisor's control board: what ``corral worker`` publishes about its workers
(``supervisor.json``) and how it applies ``corral pool scale`` and ``corral pool restart``
(``control.json``; :mod:`corral.queue.control`).

- **scale N**: the first N workers in the box's order run. Scaling up starts the missing ones
  now; scaling down asks the idle ones to stop first, each with Celery's warm shutdown (an
  attempt running there finishes first; nothing is lost).
- **restart**: a rolling, warm restart, one worker at a time, the idle ones first: a worker
  is asked to stop (warm), started again as soon as it has exited, and the next one goes only
  once it answers again (it has registered in the pool with its new process). A worker's new
  process runs the corral installed now, so ``pip install -U`` and a restart upgrade a box
  without losing a run.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from corral.queue.config import SlotConfig
from corral.queue.control import Inbox, Request, SlotState, SupervisorState, write_state
from corral.queue.registry import WorkerInfo

log = logging.getLogger("corral.worker")


class Slot(Protocol):
    config: SlotConfig
    active: bool
    #: stopping to be started again at once (a rolling restart)
    restarting: bool
    start_at: float

    @property
    def pid(self) -> int | None: ...

    def signal(self, sig: int) -> None: ...


class Board:
    def __init__(
        self,
        home: Path,
        slots: Sequence[Slot],
        pool: str,
        workers: Callable[[], list[WorkerInfo]],
        say: Callable[[str], None],
        pid: int,
    ):
        self.home = home
        self.slots = list(slots)
        self.by_name = {s.config.name: s for s in self.slots}
        self.inbox = Inbox(home)
        self.workers = workers
        self.say = say
        self.state = SupervisorState(pid=pid, pool=pool, workers=[])
        self.written = ""
        #: the restart going on: its id, and the worker it waits for
        self.rolling: str | None = None
        self.current: Slot | None = None

    def publish(self) -> None:
        self.state.workers = [
            SlotState(
                name=s.config.name,
                gpus=list(s.config.gpus),
                gpu_type=s.config.gpu_type,
                active=s.active,
                pid=s.pid,
            )
            for s in self.slots
        ]
        self.state.restarting = self.current.config.name if self.current else None
        text = self.state.to_json()
        if text != self.written:
            write_state(self.home, self.state)
            self.written = text

    def step(self, stopping: bool) -> None:
        """Apply a new request, move a rolling restart on, publish what changed."""
        request = self.inbox.take()
        if request is not None:
            if stopping:
                self.state.refused[request.id] = "corral worker is stopping"
            elif request.workers is not None:
                self._scale(request)
            elif request.restart is not None:
                self._restart(request)
        if self.rolling is not None and not stopping:
            self._roll()
        self.publish()

    # --- scale -----------------------------------------------------------------------------

    def _scale(self, request: Request) -> None:
        count = request.workers or 0
        if not 0 <= count <= len(self.slots):
            self.state.refused[request.id] = (
                f"scale {count}: this box has {len(self.slots)} workers (one per GPU it serves)"
            )
            return
        running = [s for s in self.slots if s.active]
        if count > len(running):
            for s in [s for s in self.slots if not s.active][: count - len(running)]:
                s.active = True
                s.start_at = 0.0  # started by the watch loop's next look
                self.say(f"worker {s.config.name}: starting (scale {count})")
        elif count < len(running):
            busy = self._busy()
            # idle ones first, then from the end of the box's order
            order = sorted(running, key=lambda s: (s.config.name in busy, -self.slots.index(s)))
            for s in order[: len(running) - count]:
                s.active = False
                s.restarting = False
                s.signal(signal.SIGTERM)  # Celery's warm shutdown
                self.say(f"worker {s.config.name}: stopping (scale {count}, warm)")
        self.state.applied.append(request.id)

    def _pool(self) -> list[WorkerInfo]:
        """The pool's live workers ([] when the broker is away: none answers, none is busy)."""
        try:
            return self.workers()
        except Exception as exc:
            log.warning("reading the pool's workers failed: %s", exc)
            return []

    def _busy(self) -> set[str]:
        return {w.name for w in self._pool() if w.busy}

    # --- rolling restart -------------------------------------------------------------------

    def _restart(self, request: Request) -> None:
        names = list(request.restart or ())
        unknown = [n for n in names if n not in self.by_name]
        if unknown:
            self.state.refused[request.id] = (
                f"restart: no worker {', '.join(unknown)} here ({', '.join(self.by_name)})"
            )
            return
        wanted = [self.by_name[n] for n in names] or [s for s in self.slots if s.active]
        busy = self._busy()
        queue = sorted(wanted, key=lambda s: s.config.name in busy)
        self.state.restart_left = [s.config.name for s in queue]
        self.state.applied.append(request.id)
        if self.rolling is not None:  # a newer restart replaces the one going on
            self.state.finished.append(self.rolling)
        self.rolling = request.id
        self.current = None

    def _roll(self) -> None:
        cur = self.current
        if cur is not None:
            if cur.restarting or cur.pid is None:
                return  # still stopping, or not started again yet
            if not any(w.name == cur.config.name and w.pid == cur.pid for w in self._pool()):
                return  # started: not answering yet
            self.say(f"worker {cur.config.name}: restarted (pid {cur.pid})")
            self.current = None
        while self.state.restart_left:
            s = self.by_name[self.state.restart_left.pop(0)]
            if not s.active or s.pid is None:
                continue  # scaled down meanwhile, or already starting: nothing to restart
            s.restarting = True
            s.signal(signal.SIGTERM)  # warm: an attempt running there finishes first
            self.say(f"worker {s.config.name}: restarting (warm)")
            self.current = s
            return
        assert self.rolling is not None
        self.state.finished.append(self.rolling)
        self.rolling = None
