"""Ending attempts and runs: graceful stops, teardown until the provider confirms the machine
is gone, cost, recovery into a new attempt, and the final state.

A run reaches a terminal state only after every resource of it is confirmed gone, so a
SUCCEEDED/FAILED/... run never leaves a paid machine behind.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from corral.control import launching, recovery, sync
from corral.control.context import Context, instance_of, log
from corral.errors import AgentError, Conflict, NotYetTerminated, ProviderError
from corral.store.states import RunState
from corral.wire import outcome as outcomes
from corral.wire.env import DEFAULT_GRACE_SECONDS
from corral.wire.machine import InstanceState as MachineState
from corral.wire.outcome import AttemptOutcome, OutcomeKind, StopCause
from corral.wire.status import AgentStatus, Phase


def run_cost(ctx: Context, run_id: str) -> float:
    """Sum over attempts of price x billed time (until confirmed teardown, or now if live)."""
    total = 0.0
    now = ctx.clock()
    for a in ctx.store.attempts(run_id):
        if a.started_at is None or not a.price_per_hour:
            continue
        if a.exit_reason == "no_capacity":
            continue
        end = a.billed_until or now
        total += a.price_per_hour * max(0.0, (end - a.started_at).total_seconds()) / 3600.0
    return round(total, 6)


def _attempt_cost(a: Any, until: Any) -> float:
    if a.started_at is None or not a.price_per_hour:
        return 0.0
    return round(a.price_per_hour * max(0.0, (until - a.started_at).total_seconds()) / 3600.0, 6)


def begin_finish(
    ctx: Context,
    run: Any,
    outcome: str,
    reason: str,
    *,
    graceful: bool,
    cause: StopCause | None = None,
    **fields: Any,
) -> None:
    """Move the run to STOPPING, heading to ``outcome``. A graceful finish asks the agent to
    stop its stages (SIGTERM, checkpoint, grace period) before the machine is torn down;
    ``cause`` says who asked (the attempt's outcome records it)."""
    deadline = None
    if graceful and run.state == RunState.RUNNING:
        res = _active(ctx, run)
        inst = instance_of(res) if res else None
        if inst and inst.endpoint:
            try:
                ctx.agent(run.id, run.attempt, inst.endpoint).stop(cause or StopCause.USER, reason)
                grace = DEFAULT_GRACE_SECONDS  # what the plan gave the agent
                deadline = ctx.clock() + timedelta(seconds=grace + ctx.settings.stop_margin_s)
            except AgentError as e:
                log.info("run %s: graceful stop not delivered: %s", run.id, e.message)
    if run.attempt:
        a = ctx.store.get_attempt(run.id, run.attempt)
        data = dict(a.data or {})
        data["stop_deadline"] = deadline.isoformat() if deadline else None
        if cause is not None and "outcome" not in data:
            data["outcome"] = outcomes.stopped_by(cause, reason).model_dump(mode="json")
        ctx.store.update_attempt(run.id, run.attempt, data=data)
    try:
        run = ctx.store.transition(
            run.id, RunState.STOPPING, reason, expect={run.state}, outcome=outcome, **fields
        )
    except Conflict:
        return
    handle_stopping(ctx, run)


def _active(ctx: Context, run: Any) -> Any | None:
    for r in ctx.store.resources(run_id=run.id, open_only=True):
        if r.attempt == run.attempt and r.state in ("active", "terminating"):
            return r
    return None


def record_outcome(ctx: Context, run: Any, outcome: AttemptOutcome) -> None:
    """Keep the attempt's outcome with it (``attempt.data["outcome"]``): the one value that
    recovery, webhooks and ``corral status`` read."""
    a = ctx.store.get_attempt(run.id, run.attempt)
    data = dict(a.data or {})
    data["outcome"] = outcome.model_dump(mode="json")
    ctx.store.update_attempt(
        run.id, run.attempt, data=data, exit_reason=outcome.kind.value, exit_code=outcome.exit_code
    )


def agent_finished(ctx: Context, run: Any, status: AgentStatus) -> None:
    """The agent reports its attempt over: succeed, stop, fail, or recover."""
    machine: MachineState | None = None
    if status.phase == Phase.STOPPED:  # a stop on a machine being preempted is a preemption
        res = _active(ctx, run)
        if res is not None:
            try:
                machine = ctx.provider(res.provider).status(instance_of(res)).state
            except ProviderError:
                machine = None
    outcome = outcomes.from_agent(status, machine)
    if outcome.kind == OutcomeKind.SUCCEEDED:
        record_outcome(ctx, run, outcome)
        begin_finish(ctx, run, RunState.SUCCEEDED, outcome.reason, graceful=False)
        return
    if outcome.kind == OutcomeKind.STOPPED:
        record_outcome(ctx, run, outcome)
        begin_finish(ctx, run, RunState.STOPPED, outcome.reason, graceful=False)
        return
    end_attempt(ctx, run, outcome)


def attempt_lost(ctx: Context, run: Any, state: MachineState, detail: str) -> None:
    """The provider says the machine is gone while the run still needed it."""
    end_attempt(ctx, run, outcomes.from_machine(state, detail))


def end_attempt(ctx: Context, run: Any, outcome: AttemptOutcome) -> None:
    """An attempt failed or was preempted: recover into a new attempt, or fail the run."""
    record_outcome(ctx, run, outcome)
    kind, why, exit_code = outcome.kind.value, outcome.reason, outcome.exit_code
    decision = recovery.decide(ctx.spec(run), ctx.store.attempts(run.id), kind, exit_code)
    if decision.recover:
        try:
            run = ctx.store.transition(
                run.id, RunState.RECOVERING, f"{why}; {decision.reason}", expect={run.state}
            )
        except Conflict:
            return
        ctx.store.add_event(
            run.id,
            "run.recovering",
            f"{why}; {decision.reason}",
            attempt=run.attempt,
            data={"kind": kind, "exit_code": exit_code},
        )
        handle_recovering(ctx, run)
        return
    reason = why if outcome.kind == OutcomeKind.FAILED else f"{why}; {decision.reason}"
    begin_finish(
        ctx,
        run,
        RunState.FAILED,
        reason,
        graceful=False,
        exit_code=exit_code,
        failed_stage=outcome.failed_stage,
    )


def teardown(ctx: Context, run: Any) -> bool:
    """Terminate every open resource of the run; True once the provider confirmed all gone."""
    all_gone = True
    for res in ctx.store.resources(run_id=run.id, open_only=True):
        inst = instance_of(res)
        if inst is None:  # intent never launched: ask the provider by key, then forget it
            provider = ctx.provider(res.provider)
            try:
                inst = provider.find(res.key)
            except ProviderError as e:
                log.warning("run %s: find %s failed: %s", run.id, res.key, e.message)
                all_gone = False
                continue
            if inst is None:
                young = (ctx.clock() - res.updated_at).total_seconds() < ctx.settings.intent_grace_s
                if young:  # a launch may still be in flight elsewhere: look again later
                    all_gone = False
                    continue
                ctx.store.update_resource(res.key, state="gone")
                continue
        if res.state != "terminating":
            ctx.store.update_resource(res.key, state="terminating")
        try:
            ctx.provider(res.provider).terminate(inst)
        except NotYetTerminated:
            all_gone = False
            continue
        except ProviderError as e:
            log.warning("run %s: terminate %s failed: %s", run.id, inst.instance_id, e.message)
            all_gone = False
            continue
        ctx.store.update_resource(res.key, state="gone")
        ctx.store.add_event(
            run.id,
            "instance.terminated",
            f"{res.provider}: {inst.instance_id}",
            attempt=res.attempt,
        )
    return all_gone


def _final_sync(ctx: Context, run: Any) -> None:
    res = _active(ctx, run)
    inst = instance_of(res) if res else None
    if not inst or not inst.endpoint:
        return
    try:
        client = ctx.agent(run.id, run.attempt, inst.endpoint)
        a = ctx.store.get_attempt(run.id, run.attempt)
        sync.sync_events(ctx, run.id, run.attempt, client, a.events_cursor or 0)
        sync.sync_logs(ctx, run.id, run.attempt, client)
    except AgentError:
        pass


def _close_attempt(ctx: Context, run: Any) -> None:
    if not run.attempt:
        return
    a = ctx.store.get_attempt(run.id, run.attempt)
    if a.billed_until is not None:
        return
    now = ctx.clock()
    ctx.store.update_attempt(
        run.id,
        run.attempt,
        ended_at=a.ended_at or now,
        billed_until=now,
        cost_usd=_attempt_cost(a, now),
        state="ended",
    )


def _waiting_for_graceful_stop(ctx: Context, run: Any) -> bool:
    if not run.attempt:
        return False
    a = ctx.store.get_attempt(run.id, run.attempt)
    deadline = (a.data or {}).get("stop_deadline")
    if not deadline:
        return False
    from datetime import datetime

    if ctx.clock() >= datetime.fromisoformat(deadline):
        return False
    res = _active(ctx, run)
    inst = instance_of(res) if res else None
    if not inst or not inst.endpoint:
        return False
    try:
        client = ctx.agent(run.id, run.attempt, inst.endpoint)
        status = client.status()
    except AgentError:
        return False
    from corral.control.monitor import poll_agent

    poll_agent(ctx, run, client, status)
    return not status.terminal


def _release(ctx: Context, run: Any) -> bool:
    """Ask every provider the run used to free what outlives its machines (volumes)."""
    done = True
    for name in sorted({a.provider for a in ctx.store.attempts(run.id) if a.provider}):
        provider = ctx.providers.get(name)
        if provider is None:
            continue
        try:
            provider.release_run(run.id)
        except NotYetTerminated:
            done = False
        except ProviderError as e:
            log.warning("run %s: %s could not release the run: %s", run.id, name, e.message)
    return done


def handle_stopping(ctx: Context, run: Any) -> None:
    if _waiting_for_graceful_stop(ctx, run):
        return
    _final_sync(ctx, run)
    if not teardown(ctx, run):
        return
    _close_attempt(ctx, run)
    if not _release(ctx, run):
        return
    outcome = run.outcome or RunState.FAILED
    try:
        ctx.store.transition(
            run.id,
            outcome,
            run.reason,
            expect={RunState.STOPPING},
            cost_usd=run_cost(ctx, run.id),
            requested_action=None,
        )
    except Conflict:
        return
    ctx.store.add_event(
        run.id,
        "run.finished",
        f"{outcome.lower()}: {run.reason}",
        data={"state": str(outcome), "cost_usd": run_cost(ctx, run.id)},
    )
    ctx.forget(run.id)


def handle_recovering(ctx: Context, run: Any) -> None:
    _final_sync(ctx, run)
    if not teardown(ctx, run):
        return
    _close_attempt(ctx, run)
    ctx.store.update_run(run.id, cost_usd=run_cost(ctx, run.id))
    run = ctx.store.get_run(run.id)
    launching.start_attempt(ctx, run)
