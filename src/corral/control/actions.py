"""User requests (``corral cancel`` / ``corral stop``) recorded on the run by the CLI and
carried out by the controller on its next tick.

- cancel: stop paying now. No graceful stop: the machine is terminated at once.
- stop: graceful. The agent SIGTERMs the stages (the SDK checkpoints), waits the grace period,
  then the machine is terminated. The run ends STOPPED with reason ``user``.
"""

from __future__ import annotations

from corral.control import finishing, transitions
from corral.control.context import Context
from corral.control.transitions import Note, Transition
from corral.store.records import RunRecord
from corral.store.states import Action, RunState
from corral.wire.outcome import StopCause


def handle_request(ctx: Context, run: RunRecord) -> Transition | None:
    """Carry out ``run.requested_action`` (the caller checked there is one): the run's next
    move, or None while a stop already under way goes on."""
    action = run.requested_action
    cancel = action == Action.CANCEL
    heading = RunState.CANCELLED if cancel else RunState.STOPPED
    reason = "cancelled by user" if cancel else "user"
    waiting = run.state in (RunState.PENDING, RunState.RECOVERING) and not _open(ctx, run)
    if waiting and not _used_a_provider(ctx, run):
        # no machine to stop and nothing a provider keeps for the run: straight to the end
        return Transition(
            heading,
            reason,
            fields={"requested_action": None},
            events=(
                Note(
                    "run.finished",
                    f"{heading.lower()}: {reason}",
                    data={"state": str(heading)},
                    attempt=None,
                ),
            ),
        )
    if run.state == RunState.STOPPING:
        if cancel and run.outcome != RunState.CANCELLED:
            # a cancel during a graceful stop cuts the wait short
            a = ctx.store.get_attempt(run.id, run.attempt)
            data = dict(a.data or {})
            data["stop_deadline"] = None
            ctx.store.update_attempt(run.id, run.attempt, data=data)
            run = ctx.store.update_run(
                run.id, requested_action=None, outcome=RunState.CANCELLED, reason=reason
            )
        else:
            run = ctx.store.update_run(run.id, requested_action=None)
        return finishing.handle_stopping(ctx, run)
    run = ctx.store.update_run(run.id, requested_action=None)
    return transitions.finish(heading, reason, graceful=not cancel, cause=StopCause.USER)


def _open(ctx: Context, run: RunRecord) -> bool:
    return bool(ctx.store.resources(run_id=run.id, open_only=True))


def _used_a_provider(ctx: Context, run: RunRecord) -> bool:
    """An earlier attempt of the run had a machine: its provider may keep something for the
    run beyond it (volumes, a gang's placement group), freed by the STOPPING handler's
    release (a waiting run is stopped through STOPPING, not straight to its end)."""
    return any(a.provider and a.exit_reason != "no_capacity" for a in ctx.store.attempts(run.id))
