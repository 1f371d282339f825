"""Typed steps and the ONE function that applies them to the store.

Handlers (``launching``, ``monitor``, ``finishing``, ``actions``) and watchers decide; they
return a :data:`Step` and never move a run themselves. :func:`apply` carries a step out:

* :class:`Note`: one event, nothing else;
* :class:`AskStop`: an event and a graceful stop request to the current attempt's agent (the
  run keeps its state: the attempt ends when the agent says so);
* :class:`Transition`: a compare-and-set of the run's state in the store, written in the same
  transaction as its ``run.state`` event (``Store.transition``). Conflict (another process
  moved the run first) is not an error: nothing of the transition happens and :func:`apply`
  returns None.

Restart-safety rules kept here (docs/architecture.md):

* what must be recorded before the state moves is written before the compare-and-set: the
  attempt's outcome, and for STOPPING the graceful-stop deadline (a restarted controller
  waits it out, then tears down);
* a run enters a terminal state only from STOPPING once ``finishing`` saw every machine of it
  confirmed gone, or straight from a state with no machine (PENDING; RECOVERING without an
  open resource; a launch that never happened);
* claims (PENDING/RECOVERING -> PROVISIONING) are transitions too, so only one process wins
  the launch of an attempt; the caller applies the claim before it writes the intent row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from corral.control.context import Context, log
from corral.control.plan_builder import longest_grace
from corral.control.resources import instance_of, live_resource
from corral.errors import AgentError, Conflict
from corral.store.records import RunRecord
from corral.store.states import RunState
from corral.wire import outcome as outcomes
from corral.wire.env import DEFAULT_GRACE_SECONDS
from corral.wire.outcome import AttemptOutcome, StopCause

#: the attempt a run-level event belongs to: the run's current one (None: between attempts)
CURRENT = -1


@dataclass(frozen=True)
class Note:
    """An event to record; the run does not move."""

    type: str
    reason: str
    data: Mapping[str, Any] | None = None
    #: the attempt of the event: :data:`CURRENT` (the run's, None before the first), or None
    attempt: int | None = CURRENT


@dataclass(frozen=True)
class AskStop:
    """Ask the current attempt's agent for a graceful stop (SIGTERM, checkpoint, grace
    period) saying why; ``note`` is recorded first. The run keeps its state."""

    cause: StopCause
    reason: str
    note: Note


@dataclass(frozen=True)
class Transition:
    """Move the run to ``target`` (compare-and-set against ``expect``, default: the state
    the run was read in)."""

    target: RunState
    reason: str
    expect: frozenset[RunState] | None = None
    #: STOPPING only: the terminal state the run is heading to (``runs.outcome``)
    heading: RunState | None = None
    #: STOPPING only: ask the agent for a graceful stop first (only a RUNNING run has one)
    graceful: bool = False
    #: who asked for the stop; recorded as the attempt's outcome unless it has one already
    cause: StopCause | None = None
    #: how the current attempt ended, recorded on it before the state moves
    attempt_outcome: AttemptOutcome | None = None
    #: other run columns set in the same update
    fields: Mapping[str, Any] = field(default_factory=dict)
    #: extra data of the ``run.state`` event
    event_data: Mapping[str, Any] | None = None
    #: attempt columns set once the transition happened (on the run's new attempt)
    attempt_fields: Mapping[str, Any] = field(default_factory=dict)
    #: events recorded once the transition happened
    events: tuple[Note, ...] = ()
    #: the new state's handler runs in the same tick (a stop or a recovery starts at once)
    follow: bool = False


Step = Note | AskStop | Transition


def finish(
    heading: RunState,
    reason: str,
    *,
    graceful: bool,
    cause: StopCause | None = None,
    expect: frozenset[RunState] | None = None,
    events: tuple[Note, ...] = (),
    attempt_outcome: AttemptOutcome | None = None,
    **fields: Any,
) -> Transition:
    """The way to end a run: STOPPING, heading to ``heading`` (teardown follows)."""
    return Transition(
        RunState.STOPPING,
        reason,
        expect=expect,
        heading=heading,
        graceful=graceful,
        cause=cause,
        attempt_outcome=attempt_outcome,
        fields=fields,
        events=events,
        follow=True,
    )


def apply(ctx: Context, run: RunRecord, step: Step | None) -> RunRecord | None:
    """Carry out ``step`` for ``run`` (as read at the start of the step). Returns the run
    after a transition that happened; None for no step, a note, a stop request, or a
    transition that lost its compare-and-set."""
    if step is None:
        return None
    if isinstance(step, Note):
        _record(ctx, run, step)
        return None
    if isinstance(step, AskStop):
        _record(ctx, run, step.note)
        _ask_stop(ctx, run, step.cause, step.reason)
        return None
    return _transition(ctx, run, step)


def _transition(ctx: Context, seen: RunRecord, t: Transition) -> RunRecord | None:
    # the compare-and-set is against the state the step was decided on; what is written
    # before it goes to the run's current attempt (a handler may have claimed a new one)
    expect = t.expect if t.expect is not None else frozenset({RunState(seen.state)})
    run = ctx.store.get_run(seen.id)
    if run.state not in expect:
        return None
    if t.attempt_outcome is not None and run.attempt:
        record_outcome(ctx, run, t.attempt_outcome)
    fields = dict(t.fields)
    if t.target == RunState.STOPPING:
        _prepare_stop(ctx, run, t)
        fields["outcome"] = t.heading or RunState.FAILED
    try:
        moved = ctx.store.transition(
            run.id, t.target, t.reason, expect=expect, data=t.event_data, **fields
        )
    except Conflict:
        return None
    if t.attempt_fields and moved.attempt:
        ctx.store.update_attempt(moved.id, moved.attempt, **t.attempt_fields)
    for note in t.events:
        _record(ctx, moved, note)
    if moved.terminal:
        ctx.forget(moved.id)
    return moved


def record_outcome(ctx: Context, run: RunRecord, outcome: AttemptOutcome) -> None:
    """Keep the attempt's outcome with it (``attempt.data["outcome"]``): the one value that
    recovery, webhooks and ``corral status`` read."""
    a = ctx.store.get_attempt(run.id, run.attempt)
    data = dict(a.data or {})
    data["outcome"] = outcome.model_dump(mode="json")
    ctx.store.update_attempt(
        run.id, run.attempt, data=data, exit_reason=outcome.kind.value, exit_code=outcome.exit_code
    )


def _prepare_stop(ctx: Context, run: RunRecord, t: Transition) -> None:
    """Before STOPPING: a graceful stop asks the agent to stop its stages and records until
    when teardown waits for it; a stop with a cause is the attempt's outcome (unless the
    attempt already has one)."""
    deadline = None
    asked = t.graceful and run.state == RunState.RUNNING
    if asked and _ask_stop(ctx, run, t.cause or StopCause.USER, t.reason):
        grace = _longest_grace(ctx, run)
        deadline = ctx.clock() + timedelta(seconds=grace + ctx.settings.stop_margin_s)
    if not run.attempt:
        return
    a = ctx.store.get_attempt(run.id, run.attempt)
    data = dict(a.data or {})
    data["stop_deadline"] = deadline.isoformat() if deadline else None
    if t.cause is not None and "outcome" not in data:
        data["outcome"] = outcomes.stopped_by(t.cause, t.reason).model_dump(mode="json")
    ctx.store.update_attempt(run.id, run.attempt, data=data)


def _longest_grace(ctx: Context, run: RunRecord) -> float:
    """What the plan gave the agent's stages to stop (the run's grace or a longer stage's)."""
    try:
        return longest_grace(ctx.spec(run))
    except ValueError:  # a run recorded without a valid spec (tests, old rows): the default
        return DEFAULT_GRACE_SECONDS


def _ask_stop(ctx: Context, run: RunRecord, cause: StopCause, reason: str) -> bool:
    """POST /stop to the current attempt's agent; True if it was delivered."""
    inst = instance_of(live_resource(ctx, run))
    if inst is None or not inst.endpoint:
        return False
    try:
        ctx.agent(run.id, run.attempt, inst.endpoint).stop(cause, reason)
    except AgentError as e:
        log.info("run %s: graceful stop not delivered: %s", run.id, e.message)
        return False
    return True


def _record(ctx: Context, run: RunRecord, note: Note) -> None:
    attempt = (run.attempt or None) if note.attempt == CURRENT else note.attempt
    data = dict(note.data) if note.data is not None else None
    ctx.store.add_event(run.id, note.type, note.reason, data=data, attempt=attempt)
