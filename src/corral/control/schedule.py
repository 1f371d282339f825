"""When each active run is looked at next: one slot per run, in memory, ordered by due time.

The controller's loop (``controller.Controller.serve``) asks the store which runs are active
(``Store.run_heads``: id, state, requested action; no spec) every tick, hands the slots that
are due to its workers, and files each look's result here. Nothing in this module survives a
restart, and nothing needs to: a new controller looks at every active run at once.

How soon a run is looked at again (:meth:`Schedule.done`):

* a run whose state or requested action changed under the controller (the CLI launched it,
  a user asked to stop it): at once (:meth:`Schedule.sync`);
* PROVISIONING and STOPPING: every ``Settings.tick_seconds`` (the agent coming up, a stop
  being carried out);
* PENDING and RECOVERING that wait for capacity: every ``Settings.wait_retry_s``, and at once
  when any run of this controller ends (a machine may have been freed); they form one line,
  looked at one run at a time in submission order, so the oldest gets a freed machine first
  (while its turns launch, several at a time: twice as many after each launch, up to
  ``Settings.ops_workers``; one again after a turn that found no capacity)
  (a PENDING run is always in it: its first launch too);
* RUNNING: every ``Settings.tick_seconds`` after a look that saw the attempt move (its
  phase, a stage starting or ending), then twice as long after each look that did not, up
  to ``Settings.poll_interval_s`` (log lines and progress alone do not hurry it: a steady
  run costs little however much it prints); every ``Settings.quiet_poll_s`` from the first
  look that finds its agent ringing the controller's bell (``control.bell``: ``belled``;
  no fast pace, no ramp: a change rings) while nobody follows it (:meth:`Schedule.watch`);
* a run whose agent rang (something happened) or whose bell fell silent: at once, before
  every look merely due (:meth:`Schedule.ring`: a controller behind on its routine looks, ten
  thousand quiet runs on a loaded machine, still acts on a change within moments);
* a run a CLI nudged (``control.nudges``: ``corral debug preempt``, say): at once, then,
  while RUNNING (a look at the agent, not at a cloud's API), every :data:`NUDGED_EVERY_S`
  for :data:`NUDGED_FOR_S` (what the CLI did to its machine
  shows within a moment: a job that saves and exits on the signal is seen ended, and
  recovered, a tenth of a second later rather than at the next tick);
* never later than what the look asked for (``Observation.soon``: a budget cap, a deadline
  or an idle limit coming, the provider's next check of the machine, more to copy).

A slot is ``busy`` while a look at it is in flight, so one run is never looked at twice at
once, and a slow look delays only its own run. The loop hands out at most as many looks of
the poll workers as they have room for (:meth:`Schedule.take_due`'s ``polled_room``): the
rest stay here, in order, so a run that rings later still goes first. The slots can be
filtered by a predicate on the run id (``Schedule(holds=...)``): a controller that shares a
store with others looks only at the runs it holds.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from corral.control.context import Settings
from corral.store.states import RunState

#: states a poll worker looks at (the agent and the provider's status); the rest (launches,
#: teardowns, waiting for capacity) go to the operations workers
POLLED = frozenset({RunState.PROVISIONING.value, RunState.RUNNING.value})
#: how far ahead of the looks merely due a rung run is placed (its agent said something
#: happened): before any of them, however far behind the controller is
RUNG_AHEAD_S = 3600.0
#: states that wait for capacity
WAITING = frozenset({RunState.PENDING.value, RunState.RECOVERING.value})


#: a nudged run is looked at this often ...
NUDGED_EVERY_S = 0.1
#: ... for this long after the nudge
NUDGED_FOR_S = 2.0


class Head(NamedTuple):
    """What the loop reads of an active run every tick: no spec, no history (a row of
    ``Store.run_heads`` is one as it comes)."""

    id: str
    state: str
    requested_action: str | None = None


@dataclass(slots=True)
class Slot:
    """One active run's place in the schedule (about 200 bytes)."""

    run_id: str
    state: str
    action: str | None
    #: monotonic time of the next look
    due: float
    #: the quiet interval reached (doubles after each quiet look, up to poll_interval_s)
    interval: float
    #: monotonic time the last look started (None: never looked at)
    looked: float | None = None
    #: a look is in flight
    busy: bool = False
    #: that look is the line for capacity's turn (one at a time)
    line_turn: bool = False
    #: the last look left it waiting for capacity (PENDING/RECOVERING)
    waiting: bool = False
    #: the agent rang while a look was in flight (the next look comes at once)
    rung: bool = False
    #: the run's place in submission order (its index among the active runs, oldest first)
    order: int = 0
    #: the heap entry that is this slot's (older entries are skipped)
    ticket: int = 0
    #: the longest wait between two looks at this run so far (seconds)
    longest_gap: float = 0.0
    #: monotonic time until which the run is looked at every NUDGED_EVERY_S (a CLI nudged it)
    brisk_until: float = 0.0
    #: the attempt the last look saw (the bell is the attempt's)
    attempt: int | None = None
    #: monotonic time until which someone follows the run (``corral logs -f``): usual pace
    watched_until: float = 0.0

    @property
    def polled(self) -> bool:
        """Whether a look is a poll (agent and provider) rather than an operation."""
        return self.state in POLLED and not self.action

    @property
    def queued(self) -> bool:
        """Whether the run is in the line for capacity: PENDING, or RECOVERING after a look
        found none. The line goes one run at a time, oldest first."""
        if self.action:
            return False
        return self.state == RunState.PENDING.value or (
            self.state == RunState.RECOVERING.value and self.waiting
        )


@dataclass(frozen=True, slots=True)
class Result:
    """What one look at a run left: its state, what it asked for (``wake_in``: look again
    within this many seconds; ``lively``: the look brought something), and ``gone`` once it
    is no longer active."""

    state: str
    wake_in: float | None = None
    lively: bool = False
    gone: bool = False
    attempt: int | None = None


class Schedule:
    """The slots of the active runs and a heap of their due times. Thread-safe: the loop
    syncs and takes due slots, workers file results."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        holds: Callable[[str], bool] | None = None,
        belled: Callable[[str, int | None], bool] | None = None,
    ):
        self.settings = settings
        self.clock = clock
        #: whether a run's attempt rings the controller's bell (``control.bell.Bell.belled``)
        self.belled = belled or (lambda run_id, attempt: False)
        #: which runs this controller looks at (default: all)
        self.holds = holds or (lambda run_id: True)
        self.slots: dict[str, Slot] = {}
        #: the due looks of the operations workers (and of the line), and those of the poll
        #: workers (:attr:`Slot.polled`), apart: those left for want of room wait in theirs
        #: without the others being walked past them
        self._heap: list[tuple[float, int, str]] = []
        self._polls: list[tuple[float, int, str]] = []
        self._tickets = 0
        self._lock = threading.Lock()
        #: runs of the line for capacity that are due but wait for their turn
        self._line: set[str] = set()
        #: the line in order, ``(order, run id)``: entries of runs no longer in it are
        #: skipped when they come up; rebuilt when a read of the runs moved the order
        self._line_heap: list[tuple[int, str]] = []
        self._line_stale = False
        #: runs of the line being looked at, and how many may be at once: one while the
        #: line's last turn found no capacity (the oldest gets a freed machine first); twice
        #: as many after each turn that launched, up to ``Settings.ops_workers`` (a line of
        #: thousands on a provider with room is not launched one run at a time)
        self._line_busy = 0
        self._line_width = 1
        #: the last :meth:`take_due` left due looks for want of room (the loop waits for a
        #: look to end, not for a due time already past)
        self.deferred = False

    def __len__(self) -> int:
        return len(self.slots)

    # --- the loop's side ----------------------------------------------------------------

    def sync(self, heads: Iterable[tuple[str, str, str | None]]) -> list[str]:
        """Make the slots those of ``heads`` (the active runs held, oldest first): a new run
        or one whose state or requested action changed is due at once (a new PENDING run
        makes the line for capacity due too: older runs in it go first). Returns the ids of
        runs dropped (over, or no longer held) whose look is not in flight."""
        now = self.clock()
        seen: set[str] = set()
        joined = False
        with self._lock:
            for order, (rid, state, action) in enumerate(heads):
                if not self.holds(rid):
                    continue
                seen.add(rid)
                slot = self.slots.get(rid)
                if slot is None:
                    slot = Slot(rid, state, action, now, self._fast, order=order)
                    self.slots[rid] = slot
                    self._push(slot, now)
                    joined = joined or slot.queued
                    continue
                if slot.order != order:
                    slot.order = order
                    self._line_stale = self._line_stale or rid in self._line
                if slot.state != state or slot.action != action:
                    slot.state, slot.action = state, action
                    slot.waiting = False
                    slot.interval = self._fast
                    if not slot.busy:
                        self._push(slot, now)
            dropped = [rid for rid, s in self.slots.items() if rid not in seen and not s.busy]
            for rid in dropped:
                del self.slots[rid]
            if joined:
                self._wake_queued(now)
        return dropped

    def take_due(self, polled_room: int | None = None) -> list[Slot]:
        """The slots due now, marked busy, soonest due first (rung ones first of all). The
        line for capacity (:attr:`Slot.queued`) goes one run at a time, oldest first (several
        while its turns launch: ``_line_width``): its other due runs wait
        for their turn (the next one is due as soon as the one out is back), so the oldest
        gets a freed machine first.

        ``polled_room``: at most this many looks of the poll workers (:attr:`Slot.polled`);
        the others due stay in their own heap, in order (:attr:`deferred` says some did), so
        a run that rings meanwhile is handed out before them rather than queued behind them
        in the workers' queue."""
        now = self.clock()
        taken: list[tuple[float, int, Slot]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                due, ticket, rid = heapq.heappop(self._heap)
                slot = self._valid(ticket, rid)
                if slot is None:
                    continue
                if slot.queued:
                    self._line.add(rid)
                    heapq.heappush(self._line_heap, (slot.order, rid))
                    slot.ticket = 0  # its place is the line now, not the heap
                    continue
                taken.append((due, ticket, slot))
            polls = self._polls
            while polls and polls[0][0] <= now and (polled_room is None or polled_room > 0):
                due, ticket, rid = heapq.heappop(polls)
                slot = self._valid(ticket, rid)
                if slot is None:
                    continue
                taken.append((due, ticket, slot))
                if polled_room is not None:
                    polled_room -= 1
            # the looks left for want of room wait in their heap, in their order
            top = self._top(polls)
            self.deferred = top is not None and top <= now
            taken.sort(key=lambda t: (t[0], t[1]))
            out = [slot for _, _, slot in taken]
            for slot in out:
                self._start(slot, now)
            while self._line_busy < self._line_width and self._line:
                turn = self._next_in_line()
                if turn is None:
                    break
                self._start(turn, now)
                turn.line_turn = True
                self._line_busy += 1
                out.append(turn)
        return out

    def _next_in_line(self) -> Slot | None:
        """The oldest run of the line still in it (those that left it are dropped)."""
        if self._line_stale:
            self._line_heap = [(self.slots[r].order, r) for r in self._line if r in self.slots]
            heapq.heapify(self._line_heap)
            self._line_stale = False
        while self._line_heap:
            _, rid = heapq.heappop(self._line_heap)
            if rid not in self._line:
                continue
            self._line.discard(rid)
            slot = self.slots.get(rid)
            if slot is not None and slot.queued and not slot.busy:
                return slot
        self._line.clear()
        return None

    def _start(self, slot: Slot, now: float) -> None:
        if slot.looked is not None:
            slot.longest_gap = max(slot.longest_gap, now - slot.looked)
        slot.looked = now
        slot.busy = True

    def next_due(self) -> float | None:
        """Monotonic time of the soonest due slot (None: no slot); the poll workers' looks
        left for want of room (:attr:`deferred`) are not: a look's end hands them out."""
        with self._lock:
            if self._line and self._line_busy < self._line_width:
                return self.clock()
            dues = [self._top(self._heap)]
            if not self.deferred:
                dues.append(self._top(self._polls))
            known = [d for d in dues if d is not None]
        return min(known) if known else None

    def _valid(self, ticket: int, rid: str) -> Slot | None:
        """The slot of a heap entry, if the entry is still its place and it is not busy."""
        slot = self.slots.get(rid)
        if slot is None or slot.ticket != ticket or slot.busy:
            return None
        return slot

    def _top(self, heap: list[tuple[float, int, str]]) -> float | None:
        """The due time of ``heap``'s first valid entry (the stale ones before it dropped)."""
        while heap:
            due, ticket, rid = heap[0]
            if self._valid(ticket, rid) is not None:
                return due
            heapq.heappop(heap)
        return None

    def hurry(self, run_ids: list[str]) -> None:
        """``run_ids`` are due at once, at the fast pace (a run being looked at keeps its
        look: it sees what happened)."""
        now = self.clock()
        with self._lock:
            for rid in run_ids:
                slot = self.slots.get(rid)
                if slot is None:
                    continue
                slot.brisk_until = now + NUDGED_FOR_S  # a look in flight files its next by it
                if not slot.busy:
                    slot.interval = self._fast
                    self._push(slot, now)

    def ring(self, run_ids: list[str]) -> None:
        """``run_ids`` are due at once, at the fast pace (their agents rang: something
        happened; or their bell fell silent). A look in flight is followed by another."""
        now = self.clock()
        with self._lock:
            for rid in run_ids:
                slot = self.slots.get(rid)
                if slot is None:
                    continue
                slot.interval = self._fast
                if slot.busy:
                    slot.rung = True
                else:
                    self._push(slot, now - RUNG_AHEAD_S)  # before every look merely due

    def watch(self, run_ids: list[str], until: float) -> None:
        """Someone follows ``run_ids`` until ``until`` (monotonic): they are looked at at
        the usual pace, not the belled quiet one."""
        now = self.clock()
        with self._lock:
            for rid in run_ids:
                slot = self.slots.get(rid)
                if slot is None:
                    continue
                if slot.watched_until <= now and slot.interval > self._steady and not slot.busy:
                    slot.interval = self._steady
                    if slot.due > now + self._steady:
                        self._push(slot, now)
                slot.watched_until = until

    def wake_waiting(self) -> None:
        """Every run waiting for capacity is due at once (a machine may have been freed)."""
        with self._lock:
            self._wake_queued(self.clock())

    def _wake_queued(self, now: float) -> None:
        for slot in self.slots.values():
            if slot.state in WAITING and not slot.busy and slot.due > now:
                self._push(slot, now)

    # --- the workers' side --------------------------------------------------------------

    def done(self, run_id: str, result: Result | None) -> float | None:
        """File a look's result (None: the look failed) and schedule the run's next look;
        returns its due time (None: the run is over and dropped)."""
        now = self.clock()
        s = self.settings
        with self._lock:
            slot = self.slots.get(run_id)
            if slot is None:
                return None
            if slot.line_turn:  # the line's turn is over: the next run of it may go
                slot.line_turn = False
                self._line_busy -= 1
                launched = result is not None and result.state not in WAITING
                width = min(self._line_width * 2, max(1, s.ops_workers)) if launched else 1
                self._line_width = width
            slot.busy = False
            if result is not None and result.gone:
                del self.slots[run_id]
                return None
            if result is None:  # the look failed (logged): try again at the quiet pace
                delay = s.poll_interval_s
            else:
                if result.attempt is not None:
                    slot.attempt = result.attempt
                moved = result.state != slot.state
                if moved:
                    slot.state, slot.interval = result.state, self._fast
                # waiting: the look left it where it was, for want of capacity
                slot.waiting = result.state in WAITING and not moved
                delay = self._delay(slot, result, now)
                if moved and not slot.polled:
                    delay = 0.0  # a stop or a recovery the look decided: carried on at once
            if slot.rung:  # the agent rang while the look was in flight: look again, first
                slot.rung = False
                self._push(slot, now - RUNG_AHEAD_S)
                return now
            due = now + max(0.0, delay)
            self._push(slot, due)
            return due

    def _delay(self, slot: Slot, result: Result, now: float) -> float:
        s = self.settings
        if slot.action:
            delay = self._fast
        elif slot.state in WAITING:
            delay = max(self._fast, s.wait_retry_s)
        elif slot.state == RunState.RUNNING.value:
            if slot.watched_until <= now and self.belled(slot.run_id, slot.attempt):
                # a change rings: no need to look, nor to ramp up to the quiet pace from a
                # fast one after it moved (a ring during a look brings the next at once)
                slot.interval = delay = max(self._steady, s.quiet_poll_s)
            else:
                if result.lively:
                    slot.interval = self._fast
                delay = slot.interval
                slot.interval = min(max(slot.interval * 2, self._fast), self._steady)
        else:  # PROVISIONING, STOPPING
            delay = self._fast
        if result.wake_in is not None:
            delay = min(delay, result.wake_in)
        if slot.brisk_until > now and slot.state == RunState.RUNNING.value:
            delay = min(delay, NUDGED_EVERY_S)  # (an agent look: no cloud API call)
        return delay

    @property
    def _fast(self) -> float:
        return max(0.0, self.settings.tick_seconds)

    @property
    def _steady(self) -> float:
        return max(self._fast, self.settings.poll_interval_s)

    def _push(self, slot: Slot, due: float) -> None:
        self._tickets += 1
        slot.ticket = self._tickets
        slot.due = due
        # (a look's kind follows the slot's state, which changes only where it is pushed again)
        heap = self._polls if slot.polled else self._heap
        heapq.heappush(heap, (due, self._tickets, slot.run_id))
