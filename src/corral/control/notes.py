"""What the controller notes of each run in memory, between two looks at it: timers and
marks that need not survive a restart (each user's docstring says what a restarted controller
does without them). One typed object per run (:class:`RunNotes`), kept by the
:class:`~corral.control.context.Context` and dropped with the run (``Context.forget``); what
belongs to one attempt (:class:`AttemptNotes`) starts afresh with the next attempt."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class IdleMark:
    """Since when the attempt has looked the same (``token``: what it looked like)."""

    since: datetime
    token: tuple[Any, ...]


@dataclass(frozen=True)
class CostBasis:
    """What a run's cost was last worked out from (``cost.run_cost``): the attempts billed
    to an end (their sum) and those billed until now."""

    #: the newest attempt then
    attempt: int
    closed: float
    live: tuple[Any, ...]


@dataclass
class AttemptNotes:
    """Notes of one attempt of a run."""

    number: int
    #: the idle watcher: since when nothing moved
    idle: IdleMark | None = None
    #: the preemption watcher: the provider was last asked for the machine's state then
    provider_polled_at: datetime | None = None
    #: the preemption watcher: the agent was asked to stop for a preemption notice
    preemption_stop_asked: bool = False
    #: the health watcher: the agent has not answered since then
    unreachable_since: datetime | None = None
    #: the health watcher: the silence was noted (an ``agent.unreachable`` event)
    unreachable_noted: bool = False
    #: the attempt's ``started_at`` as last written or read while its machine queued
    queue_start: datetime | None = None
    #: the gang watcher: a node went and the head's agent was asked to stop then
    node_lost_at: datetime | None = None
    #: the ranks ended in failure while a node did not answer: since then its provider's
    #: verdict is waited for (``finishing.agent_finished``)
    node_unheard_at: datetime | None = None
    #: a repaired gang: the ranks of kept nodes whose agent took this attempt (a restarted
    #: controller asks each again: one that took it already answers with its new token)
    handed: set[int] = field(default_factory=set)
    #: the repair: the ended attempt's nodes still running their stages were asked to stop
    survivors_asked_at: datetime | None = None
    #: a gang's other nodes: how far their stage logs were copied (rank -> ``sync.PollState``)
    node_logs: dict[int, Any] = field(default_factory=dict)
    #: the booting machine's console log was last read then (``machine_log.boot_failure``)
    boot_log_read_at: datetime | None = None


@dataclass
class RunNotes:
    """Notes of one run."""

    #: the run's cost was last worked out then (sync)
    cost_at: datetime | None = None
    #: what the cost was worked out from (a steady run's is worked out again from it)
    cost_basis: CostBasis | None = None
    #: the budget watcher last looked then
    budget_checked_at: datetime | None = None
    #: the budget warning was given
    budget_warned: bool = False
    #: the budget.forecast note was given (or found in the store)
    budget_forecast_warned: bool = False
    #: the spending caps whose warning this run was given ("scope:subject:period")
    cap_warned: set[str] = field(default_factory=set)
    _attempt: AttemptNotes | None = field(default=None, repr=False)

    def attempt(self, number: int) -> AttemptNotes:
        """The notes of attempt ``number`` (fresh ones when the run moved to a new attempt)."""
        current = self._attempt
        if current is None or current.number != number:
            current = self._attempt = AttemptNotes(number)
        return current
