"""Spending caps across runs: what a cap has spent in its period, and which of its runs must
stop so that the bill stays under it.

A cap (``corral budget``: per user, per project or for the team; per calendar month, UTC, or in
all) counts every paid attempt of the runs it covers, each billed as a run's own cost is
(:mod:`corral.control.cost`: price x time from provision to confirmed teardown, or to now while
the machine may bill), apportioned to the period. When what is spent, plus what each running
machine will cost until its stop is confirmed (the provider's learned stop time, with a margin,
and the wait for the next look), would reach the cap, runs are stopped in this order until the
rest fits: runs that have no job running (provisioning, recovering) first, then running ones,
the most recently started first (the oldest-started run is stopped last: it is the furthest
along). Each stop is graceful (a checkpoint first), reason ``budget``.

What a cap has spent is worked out at most once per ``Settings.tick_seconds`` per controller
(:class:`CapBook`), however many runs it covers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from corral.store.caps import Span
from corral.store.records import CapRecord
from corral.store.states import ACTIVE_STATES, RunState

#: the share added to a provider's learned stop time (as the run budget does)
STOP_MARGIN = 0.25


def period_start(period: str, now: datetime) -> datetime | None:
    """The start of the cap's current period: the first of ``now``'s month (UTC) for
    ``month``; None (all time) for ``total``."""
    if period != "month":
        return None
    now = now.astimezone(UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def period_label(period: str, now: datetime) -> str:
    """``2026-11`` for a monthly cap, ``total`` otherwise."""
    start = period_start(period, now)
    return "total" if start is None else f"{start:%Y-%m}"


def span_cost(span: Span, since: datetime | None, now: datetime) -> float:
    """What ``span`` billed from ``since`` (None: its start) until its confirmed teardown or
    ``now``."""
    begin = span.started_at if since is None else max(span.started_at, since)
    end = span.billed_until or now
    return max(0.0, (end - begin).total_seconds()) * span.price_per_hour / 3600.0


def describe(cap: CapRecord) -> str:
    """``project 'llm'``, ``user 'alice'``, ``the team``."""
    return "the team" if cap.scope == "team" else f"{cap.scope} {cap.subject!r}"


@dataclass
class CapState:
    """A cap as it stands now."""

    cap: CapRecord
    period: str
    spent_usd: float
    #: the attempts still billing, of active runs
    live: list[Span] = field(default_factory=list)
    #: runs to stop now (their ids), by the rule in the module's docstring
    to_stop: frozenset[str] = frozenset()
    #: seconds until what is spent plus the stops' cost reaches the cap (None: nothing bills)
    reach_in_s: float | None = None

    @property
    def left_usd(self) -> float:
        return self.cap.amount_usd - self.spent_usd

    @property
    def runs(self) -> frozenset[str]:
        return frozenset(s.run_id for s in self.live)


def _stop_order(live: Sequence[Span]) -> list[Span]:
    def key(span: Span) -> tuple[int, float]:
        started = span.run_started_at or span.started_at
        return (0 if span.run_state != RunState.RUNNING.value else 1, -started.timestamp())

    return sorted(live, key=key)


def assess(
    cap: CapRecord,
    spans: Sequence[Span],
    now: datetime,
    *,
    stop_s: Callable[[str], float],
    next_look_s: float,
) -> CapState:
    """The cap's state from the ``spans`` it counts (``Store.cap_spans``). ``stop_s(provider)``:
    the seconds a stop there is expected to take; ``next_look_s``: the longest a run waits for
    its next look."""
    since = period_start(cap.period, now)
    spent = sum(span_cost(s, since, now) for s in spans)
    live = [
        s
        for s in spans
        if s.billed_until is None and s.run_state in ACTIVE_STATES and s.attempt == s.run_attempt
    ]
    state = CapState(cap, period_label(cap.period, now), spent, live)
    if not live:
        return state
    stopping = {
        s.run_id: s.price_per_hour * stop_s(s.provider) * (1 + STOP_MARGIN) / 3600 for s in live
    }
    going = {s.run_id: stopping[s.run_id] + s.price_per_hour * next_look_s / 3600 for s in live}
    projected = spent + sum(going.values())
    chosen: list[str] = []
    for span in _stop_order(live):
        if projected < cap.amount_usd:
            break
        chosen.append(span.run_id)
        projected -= going[span.run_id] - stopping[span.run_id]
    state.to_stop = frozenset(chosen)
    rate = sum(s.price_per_hour for s in live if s.run_id not in state.to_stop) / 3600
    if rate > 0 and not chosen:
        state.reach_in_s = max(0.0, (cap.amount_usd - projected) / rate)
    return state


@dataclass
class _Entry:
    at: float
    states: list[CapState]


class CapBook:
    """Every cap's state, worked out at most once per ``max_age_s`` (monotonic seconds) and
    shared by the controller's workers."""

    def __init__(self, max_age_s: float):
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._entry: _Entry | None = None

    def states(self, now_s: float, build: Callable[[], list[CapState]]) -> list[CapState]:
        with self._lock:
            entry = self._entry
            if entry is None or now_s - entry.at >= self.max_age_s:
                entry = self._entry = _Entry(now_s, build())
            return entry.states

    def clear(self) -> None:
        with self._lock:
            self._entry = None
