"""What the store hands out: plain frozen dataclasses, never live database objects.

Each table's column list lives here (the queries are written against it); ``schema.py`` holds
the same tables as SQLAlchemy metadata for alembic, and a test checks the two agree.
Datetimes are timezone-aware UTC; JSON columns come back as plain dicts and lists.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from corral.store.states import ACTIVE_STATES, TERMINAL_STATES


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class _Record:
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (datetimes as ISO 8601 strings)."""
        names = self.__dataclass_fields__  # type: ignore[attr-defined]
        return {n: _jsonable(getattr(self, n)) for n in names}


@dataclass(frozen=True, slots=True)
class RunRecord(_Record):
    id: str
    name: str
    state: str
    reason: str
    outcome: str | None
    requested_action: str | None
    spec_hash: str
    spec_path: str
    workdir: str
    provider: str | None
    attempt: int
    cost_usd: float
    exit_code: int | None
    failed_stage: str | None
    completed_stages: list[str]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    #: The resolved spec; None when listed without ``with_spec``. Last in the table too: a
    #: large value spills into SQLite overflow pages, and columns after it would cost reads.
    spec: dict[str, Any] | None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


@dataclass(frozen=True, slots=True)
class AttemptRecord(_Record):
    id: int
    run_id: str
    number: int
    provider: str
    offer: dict[str, Any]
    instance_id: str | None
    endpoint: str | None
    state: str
    price_per_hour: float
    started_at: datetime | None
    running_at: datetime | None
    ended_at: datetime | None
    billed_until: datetime | None
    exit_reason: str | None
    exit_code: int | None
    cost_usd: float
    events_cursor: int
    log_offsets: dict[str, int]
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventRecord(_Record):
    id: int
    run_id: str
    attempt: int | None
    ts: datetime
    type: str
    reason: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResourceRecord(_Record):
    id: int
    run_id: str
    attempt: int
    provider: str
    key: str
    state: str
    instance_id: str | None
    instance: dict[str, Any] | None
    data: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @property
    def open(self) -> bool:
        return self.state != "gone"


@dataclass(frozen=True, slots=True)
class WebhookCursorRecord(_Record):
    """How far the events of a run went out to one of its webhooks (see ``docs/webhooks.md``)."""

    run_id: str
    #: index of the webhook in the run's ``notify.webhooks``
    webhook: int
    #: every event of the run up to this id was delivered or given up on (0: none yet)
    event_id: int
    #: event time of the last ``progress`` event sent (progress throttling)
    progress_ts: datetime | None
    #: per stage, the event time (ISO 8601) of its last ``progress`` event sent (throttling is
    #: per stage); None for a cursor written before stages were told apart
    progress_stages: dict[str, str] | None
    delivered: int
    failed: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EventPositionRecord(_Record):
    """How far a consumer of the global event feed has handled it."""

    consumer: str
    event_id: int
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleRecord(_Record):
    """A cron schedule registered with ``corral schedule add``."""

    name: str
    cron: str
    timezone: str
    #: "skip" or "run-once": what to do with ticks missed while no controller ran
    missed: str
    spec_hash: str
    spec_path: str
    workdir: str
    created_at: datetime
    updated_at: datetime
    #: the next tick due (UTC)
    next_at: datetime
    last_tick_at: datetime | None
    last_run_id: str | None
    #: runs started, ticks skipped
    fired: int
    skipped: int
    spec: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduleTickRecord(_Record):
    """A tick a schedule acted on: the run it started (None: skipped) and how many ticks
    before it were missed."""

    schedule: str
    tick_at: datetime
    run_id: str | None
    missed: int
    fired_at: datetime


@dataclass(frozen=True, slots=True)
class CapRecord(_Record):
    """A spending cap across runs (``corral budget``)."""

    #: "user", "project" or "team"
    scope: str
    #: the user's or project's name; '' for the team
    subject: str
    #: "month" (a calendar month, UTC) or "total"
    period: str
    amount_usd: float
    warn_at: float
    created_at: datetime
    updated_at: datetime
    #: who set it (a token's or login name), if known
    set_by: str | None


@dataclass(frozen=True, slots=True)
class SweepRecord(_Record):
    """A hyperparameter sweep (``corral sweep launch``)."""

    name: str
    #: RUNNING, STOPPING (no new trial; the running ones are stopped), FINISHED, STOPPED
    state: str
    reason: str
    spec_path: str
    owner: str | None
    best_trial: int | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    #: the ``sweep:`` section, validated
    sweep: dict[str, Any]
    #: the resolved job spec the trials start from
    job: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TrialRecord(_Record):
    """One trial of a sweep: a run with its parameters and what it reported."""

    sweep: str
    number: int
    run_id: str
    #: running, complete, pruned, failed, stopped
    state: str
    params: dict[str, Any]
    #: the metric's last reported value
    value: float | None
    step: int | None
    #: {step (as text): value}
    intermediate: dict[str, Any]
    events_cursor: int
    cost_usd: float
    created_at: datetime
    updated_at: datetime


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


RUN_COLUMNS = _names(RunRecord)
ATTEMPT_COLUMNS = _names(AttemptRecord)
EVENT_COLUMNS = _names(EventRecord)
RESOURCE_COLUMNS = _names(ResourceRecord)
WEBHOOK_CURSOR_COLUMNS = _names(WebhookCursorRecord)
EVENT_POSITION_COLUMNS = _names(EventPositionRecord)
SCHEDULE_COLUMNS = _names(ScheduleRecord)
SCHEDULE_TICK_COLUMNS = _names(ScheduleTickRecord)
CAP_COLUMNS = _names(CapRecord)
SWEEP_COLUMNS = _names(SweepRecord)
TRIAL_COLUMNS = _names(TrialRecord)

#: Columns that need converting between Python and the database, per table.
TIMESTAMPS = {
    "runs": frozenset(
        {"created_at", "updated_at", "started_at", "finished_at", "lease_expires_at"}
    ),
    "attempts": frozenset({"started_at", "running_at", "ended_at", "billed_until"}),
    "events": frozenset({"ts"}),
    "resources": frozenset({"created_at", "updated_at"}),
    "webhook_cursors": frozenset({"progress_ts", "updated_at"}),
    "event_positions": frozenset({"updated_at", "lease_expires_at"}),
    "schedules": frozenset({"created_at", "updated_at", "next_at", "last_tick_at"}),
    "schedule_ticks": frozenset({"tick_at", "fired_at"}),
    "spending_caps": frozenset({"created_at", "updated_at"}),
    "run_owners": frozenset(),
    "sweeps": frozenset({"created_at", "updated_at", "finished_at"}),
    "sweep_trials": frozenset({"created_at", "updated_at"}),
}
JSONS = {
    "runs": frozenset({"spec", "completed_stages"}),
    "attempts": frozenset({"offer", "log_offsets", "data"}),
    "events": frozenset({"data"}),
    "resources": frozenset({"instance", "data"}),
    "webhook_cursors": frozenset({"progress_stages"}),
    "event_positions": frozenset(),
    "schedules": frozenset({"spec"}),
    "schedule_ticks": frozenset(),
    "spending_caps": frozenset(),
    "run_owners": frozenset(),
    "sweeps": frozenset({"sweep", "job"}),
    "sweep_trials": frozenset({"params", "intermediate"}),
}
COLUMNS = {
    "runs": RUN_COLUMNS,
    "attempts": ATTEMPT_COLUMNS,
    "events": EVENT_COLUMNS,
    "resources": RESOURCE_COLUMNS,
    "webhook_cursors": WEBHOOK_CURSOR_COLUMNS,
    "event_positions": EVENT_POSITION_COLUMNS,
    "schedules": SCHEDULE_COLUMNS,
    "schedule_ticks": SCHEDULE_TICK_COLUMNS,
    "spending_caps": CAP_COLUMNS,
    "run_owners": ("run_id", "owner", "project"),
    "sweeps": SWEEP_COLUMNS,
    "sweep_trials": TRIAL_COLUMNS,
}
