"""What a run's page draws: loss and validation curves from its progress events, its cost over
time from its attempts, and the timeline of every attempt (stages, preemptions, recoveries).

Curves: one point per ``progress`` event (x: the step), ``loss`` and every reported metric
whose name says loss (``val_loss``, ``eval_loss``) in the loss chart, the other ``val*`` /
``eval*`` metrics in the validation chart (``corral.wire.metric_names``); a diverged loss
(``nan``, ``inf``) is left out. The validation values the agent's throttle kept from an event
of their own (an evaluation's ``metrics`` record, a progress record between two events) come
with the next event as its ``points`` (``[step, {name: value}]``) and are drawn at their own
step. A
run with several stages reporting progress gets one series per stage. Each series keeps at
most :data:`MAX_POINTS` points (evenly thinned, the last one always kept).

Cost: the attempts are billed one after the other, so the run's cost is a line through
(each attempt's start, what the earlier ones cost) and (its end, or now, plus its own cost).
A live attempt's own cost is what it has accrued until now (price x time since its start, as
the controller bills it), not the 0 stored until its machine's teardown is confirmed.

Timeline: a stage drawn on an attempt's bar ran on it: a stage the attempt ended before it
started (``stage.finished`` ``cancelled`` without a start) is not drawn. A stage that exited 75
because the attempt was asked to stop (user, budget, deadline) is shown ``stopped``, as
``corral status`` shows it: only a preemption is drawn as one.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from corral.control.cost import NO_CAPACITY, attempt_cost
from corral.service._store import using
from corral.service.views import View
from corral.store import AttemptRecord, EventRecord, Store
from corral.wire.metric_names import is_validation
from corral.wire.outcome import AttemptOutcome, OutcomeKind
from corral.wire.status import StageState

#: the most points one series keeps
MAX_POINTS = 1000
#: progress events read per query
PAGE = 5000


class Series(View):
    name: str
    #: [x, y] pairs: (step, value) for curves, (unix seconds, USD) for cost
    points: list[tuple[float, float]]


class RunCharts(View):
    run_id: str
    loss: list[Series]
    validation: list[Series]
    cost: Series
    #: the last step reported and its total, where known
    step: int | None
    total: int | None


class StageSpan(View):
    name: str
    state: str
    started_at: float | None
    finished_at: float | None


class AttemptSpan(View):
    number: int
    provider: str
    state: str
    started_at: float | None
    running_at: float | None
    ended_at: float | None
    #: succeeded, failed, preempted, stopped (None while it runs)
    outcome: str | None
    reason: str | None
    cost_usd: float
    stages: list[StageSpan]


class Mark(View):
    ts: float
    attempt: int | None
    kind: str
    text: str


class Timeline(View):
    run_id: str
    state: str
    created_at: float
    now: float
    attempts: list[AttemptSpan]
    #: preemption notices, recoveries, stop requests, the end of the run
    marks: list[Mark]


def _unix(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / (MAX_POINTS - 1)
    kept = [points[int(i * stride)] for i in range(MAX_POINTS - 1)]
    return [*kept, points[-1]]


def _events(store: Store, run_id: str, types: list[str]) -> list[EventRecord]:
    out: list[EventRecord] = []
    after = 0
    while True:
        page = store.events(run_id, after_id=after, limit=PAGE, types=types)
        out += page
        if len(page) < PAGE:
            return out
        after = page[-1].id


def _curves(
    progress: list[EventRecord],
) -> tuple[list[Series], list[Series], int | None, int | None]:
    stages = {str(e.data.get("stage") or "") for e in progress}
    many = len(stages) > 1
    loss: dict[str, list[tuple[float, float]]] = {}
    validation: dict[str, list[tuple[float, float]]] = {}
    step = total = None

    def add(prefix: str, x: float, values: dict[str, Any]) -> None:
        for name, raw in values.items():
            y = _number(raw)
            if y is None:
                continue
            if "loss" in name.lower():
                loss.setdefault(prefix + name, []).append((x, y))
            elif is_validation(name):
                validation.setdefault(prefix + name, []).append((x, y))

    for e in progress:
        x = _number(e.data.get("step"))
        if x is None:
            continue
        step = int(x)
        total = int(t) if (t := _number(e.data.get("total"))) is not None else total
        prefix = f"{e.data.get('stage')} " if many else ""
        for point in e.data.get("points") or []:
            if not (isinstance(point, list) and len(point) == 2 and isinstance(point[1], dict)):
                continue
            if (px := _number(point[0])) is not None:
                add(prefix, px, {str(k): v for k, v in point[1].items()})
        values: dict[str, Any] = {"loss": e.data.get("loss")}
        metrics = e.data.get("metrics")
        if isinstance(metrics, dict):
            values.update({str(k): v for k, v in metrics.items() if k != "loss"})
        add(prefix, x, values)
    as_series = [Series(name=n, points=_thin(p)) for n, p in loss.items()]
    val_series = [Series(name=n, points=_thin(p)) for n, p in validation.items()]
    return as_series, val_series, step, total


def _live_cost(attempt: AttemptRecord, now: datetime) -> float:
    """What the attempt has cost by ``now``: its stored cost once its billing ended, else
    what it has accrued since its start (the controller's own rule, ``control.cost``)."""
    if attempt.billed_until is not None or attempt.exit_reason == NO_CAPACITY:
        return attempt.cost_usd
    return max(attempt.cost_usd, attempt_cost(attempt, now))


def _cost(attempts: list[AttemptRecord], now: datetime) -> Series:
    points: list[tuple[float, float]] = []
    spent = 0.0
    for a in attempts:
        start = a.started_at
        if start is None:
            continue
        end = a.ended_at or now
        points.append((start.timestamp(), round(spent, 6)))
        spent += _live_cost(a, now)
        points.append((max(end, start).timestamp(), round(spent, 6)))
    return Series(name="cost (USD)", points=points)


def run_charts(ref: str, *, store: Store | None = None, now: datetime | None = None) -> RunCharts:
    """The run's loss and validation curves and its cost over time."""
    with using(store) as st:
        run = st.get_run(ref)
        progress = _events(st, run.id, ["progress"])
        attempts = st.attempts(run.id)
    loss, validation, step, total = _curves(progress)
    return RunCharts(
        run_id=run.id,
        loss=loss,
        validation=validation,
        cost=_cost(attempts, now or datetime.now(UTC)),
        step=step,
        total=total,
    )


def _outcome(attempt: AttemptRecord) -> AttemptOutcome | None:
    raw = (attempt.data or {}).get("outcome")
    try:
        return AttemptOutcome.model_validate(raw) if raw else None
    except ValueError:
        return None


def _iso(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _shown_state(state: str, stopped: bool) -> str:
    """A stage's state as drawn: one that exited 75 because its attempt was asked to stop is
    ``stopped`` (only a preemption is drawn as one)."""
    return StageState.STOPPED.value if stopped and state == StageState.PREEMPTED.value else state


def _stage_span(span: dict[str, Any], stopped: bool) -> StageSpan:
    return StageSpan(
        name=span["name"],
        state=_shown_state(str(span.get("state", "running")), stopped),
        started_at=_unix(span.get("started_at")),
        finished_at=_unix(span.get("finished_at")),
    )


def _cached_stages(attempt: AttemptRecord, stopped: bool) -> list[StageSpan]:
    """The stages as the agent last reported them (the status the controller cached on the
    attempt): for an attempt whose stage events never reached the store (a machine taken
    away between two polls)."""
    status = (attempt.data or {}).get("status") or {}
    return [
        StageSpan(
            name=str(s.get("name")),
            state=_shown_state(str(s.get("state") or "running"), stopped),
            started_at=_iso(s.get("started_at")),
            finished_at=_iso(s.get("finished_at")),
        )
        for s in status.get("stages") or []
        if isinstance(s, dict) and s.get("started_at")
    ]


#: events shown as marks on the timeline: type -> kind
_MARKS = {
    "instance.preempting": "preemption",
    "run.recovering": "recovery",
    "run.finished": "end",
    "agent.unreachable": "unreachable",
    "budget.warning": "budget",
    "budget.forecast": "budget",
}


def run_timeline(ref: str, *, store: Store | None = None, now: datetime | None = None) -> Timeline:
    """Every attempt of the run with its stages' spans and how it ended, and the marks
    between them (a preemption notice, a recovery, a stop request, the end)."""
    with using(store) as st:
        run = st.get_run(ref)
        attempts = st.attempts(run.id)
        events = _events(
            st, run.id, ["stage.started", "stage.finished", "run.state", *sorted(_MARKS)]
        )
    spans: dict[tuple[int, str], dict[str, Any]] = {}
    marks: list[Mark] = []
    for e in events:
        stage = str(e.data.get("stage") or "")
        if e.type == "stage.started" and e.attempt is not None:
            spans[(e.attempt, stage)] = {"name": stage, "state": "running", "started_at": e.ts}
        elif e.type == "stage.finished" and e.attempt is not None:
            span = spans.setdefault((e.attempt, stage), {"name": stage, "started_at": None})
            span["state"] = str(e.data.get("state") or "finished")
            span["finished_at"] = e.ts
        elif e.type == "run.state" and e.data.get("to") == "STOPPING":
            marks.append(Mark(ts=e.ts.timestamp(), attempt=e.attempt, kind="stop", text=e.reason))
        elif e.type in _MARKS:
            kind = _MARKS[e.type]
            marks.append(Mark(ts=e.ts.timestamp(), attempt=e.attempt, kind=kind, text=e.reason))
    out = []
    moment = now or datetime.now(UTC)
    for a in attempts:
        outcome = _outcome(a)
        stopped = outcome is not None and outcome.kind == OutcomeKind.STOPPED
        stages = [
            _stage_span(s, stopped)
            for (number, _), s in spans.items()
            if number == a.number and s.get("started_at") is not None
        ] or _cached_stages(a, stopped)
        out.append(
            AttemptSpan(
                number=a.number,
                provider=a.provider,
                state=a.state,
                started_at=_unix(a.started_at),
                running_at=_unix(a.running_at),
                ended_at=_unix(a.ended_at),
                outcome=outcome.kind.value if outcome else None,
                reason=(outcome.reason if outcome else None) or a.exit_reason,
                cost_usd=_live_cost(a, moment),
                stages=stages,
            )
        )
    return Timeline(
        run_id=run.id,
        state=run.state,
        created_at=run.created_at.timestamp(),
        now=moment.timestamp(),
        attempts=out,
        marks=marks,
    )
