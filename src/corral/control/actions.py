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
    if run.state == RunState.PENDING or (run.state == RunState.RECOVERING and not _open(ctx, run)):
        # no machine to stop: straight to the end
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
