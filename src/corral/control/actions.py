"""User requests (``corral cancel`` / ``corral stop``) recorded on the run by the CLI and
carried out by the controller on its next tick.

- cancel: stop paying now. No graceful stop: the machine is terminated at once.
- stop: graceful. The agent SIGTERMs the stages (the SDK checkpoints), waits the grace period,
  then the machine is terminated. The run ends STOPPED with reason ``user``.
"""

from __future__ import annotations

from typing import Any

from corral.control import finishing
from corral.control.context import Context
from corral.errors import Conflict
from corral.store.states import RunState
from corral.wire.outcome import StopCause


def handle_request(ctx: Context, run: Any) -> bool:
    """Carry out ``run.requested_action``; True if the run was handled this tick."""
    action = run.requested_action
    if not action:
        return False
    outcome = RunState.CANCELLED if action == "cancel" else RunState.STOPPED
    reason = "cancelled by user" if action == "cancel" else "user"
    if run.state == RunState.PENDING or (run.state == RunState.RECOVERING and not _open(ctx, run)):
        try:
            ctx.store.transition(run.id, outcome, reason, expect={run.state}, requested_action=None)
            ctx.store.add_event(
                run.id, "run.finished", f"{outcome.lower()}: {reason}", data={"state": str(outcome)}
            )
        except Conflict:
            pass
        return True
    if run.state == RunState.STOPPING:
        if action == "cancel" and run.outcome != RunState.CANCELLED:
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
        finishing.handle_stopping(ctx, run)
        return True
    ctx.store.update_run(run.id, requested_action=None)
    run = ctx.store.get_run(run.id)
    finishing.begin_finish(
        ctx, run, outcome, reason, graceful=(action == "stop"), cause=StopCause.USER
    )
    return True


def _open(ctx: Context, run: Any) -> bool:
    return bool(ctx.store.resources(run_id=run.id, open_only=True))
