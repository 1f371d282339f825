"""PROVISIONING and RUNNING: watch the instance through its provider and its agent.

The provider is the source of truth for "the machine is gone"; an unreachable agent alone is
never treated as a preemption or a crash (a slow agent is not a dead one).
"""

from __future__ import annotations

from typing import Any

from corral.control import finishing, launching, planner, sync
from corral.control.context import Context, instance_of, log
from corral.errors import AgentError, Conflict, ProviderError, WireVersionMismatch
from corral.providers.base import InstanceState, Offer
from corral.store.states import RunState
from corral.wire.outcome import StopCause
from corral.wire.status import AgentStatus


def open_resources(ctx: Context, run: Any) -> list[Any]:
    return [
        r for r in ctx.store.resources(run_id=run.id, open_only=True) if r.attempt == run.attempt
    ]


def active_resource(ctx: Context, run: Any) -> Any | None:
    for r in open_resources(ctx, run):
        if r.state == "active":
            return r
    return None


def _refresh_endpoint(ctx: Context, run: Any, res: Any) -> tuple[Any, InstanceState]:
    """Ask the provider about the instance; store the agent endpoint once it is known."""
    inst = instance_of(res)
    st = ctx.provider(res.provider).status(inst)
    if st.endpoint and st.endpoint != inst.endpoint:
        inst = inst.model_copy(update={"endpoint": st.endpoint})
        res = ctx.store.update_resource(res.key, instance=inst.model_dump(mode="json"))
        ctx.store.update_attempt(run.id, run.attempt, endpoint=st.endpoint)
    return res, st


def handle_provisioning(ctx: Context, run: Any) -> None:
    res = active_resource(ctx, run)
    if res is None:
        intents = [r for r in open_resources(ctx, run) if r.state == "intent"]
        if intents:  # a launch was interrupted: repeat it with the same key (idempotent)
            r = intents[0]
            if (ctx.clock() - r.updated_at).total_seconds() < ctx.settings.intent_grace_s:
                return  # another process (the CLI) may be inside that launch right now
            offer = Offer.model_validate(r.data["offer"])
            if launching.launch_key(ctx, run, run.attempt, r.key, offer) == launching.NEXT:
                launching.launch_offers(ctx, run, [])
            return
        offers = planner.plan(
            ctx.providers, planner.requirements_from_spec(ctx.spec(run))
        ).available
        launching.launch_offers(ctx, run, offers)
        return
    try:
        res, st = _refresh_endpoint(ctx, run, res)
    except ProviderError as e:
        log.warning("run %s: provider status failed: %s", run.id, e.message)
        return
    if st.state.gone:
        finishing.attempt_lost(ctx, run, st.state, st.detail)
        return
    inst = instance_of(res)
    if inst.endpoint:
        try:
            ready = ctx.agent(run.id, run.attempt, inst.endpoint).ready()
        except WireVersionMismatch as e:  # no retry or recovery can fix this: say so, stop
            finishing.begin_finish(ctx, run, RunState.FAILED, e.message, graceful=False)
            return
        except AgentError:
            ready = False
        if ready:
            try:
                ctx.store.transition(
                    run.id,
                    RunState.RUNNING,
                    f"agent ready on {res.provider}",
                    expect={RunState.PROVISIONING},
                )
            except Conflict:
                return
            ctx.store.update_attempt(run.id, run.attempt, state="running", running_at=ctx.clock())
            ctx.store.add_event(
                run.id, "run.started", f"attempt {run.attempt} running", attempt=run.attempt
            )
            return
    attempt = ctx.store.get_attempt(run.id, run.attempt)
    waited = (ctx.clock() - attempt.started_at).total_seconds()
    if waited > ctx.settings.provision_timeout_s:
        finishing.begin_finish(
            ctx,
            run,
            RunState.FAILED,
            f"the agent did not become ready within {ctx.settings.provision_timeout_s:.0f}s "
            f"({st.detail or st.state.value})",
            graceful=False,
        )


def handle_running(ctx: Context, run: Any) -> None:
    res = active_resource(ctx, run)
    if res is None:  # the resource row vanished: the instance is gone
        finishing.attempt_lost(ctx, run, InstanceState.TERMINATED, "no open resource")
        return
    inst = instance_of(res)
    memo_key = f"{run.id}:{run.attempt}:unreachable"
    try:
        client = ctx.agent(run.id, run.attempt, inst.endpoint)
        status = client.status()
    except WireVersionMismatch as e:
        finishing.begin_finish(ctx, run, RunState.FAILED, e.message, graceful=False)
        return
    except AgentError as e:
        _agent_unreachable(ctx, run, res, memo_key, e)
        return
    if ctx.memo.pop(memo_key, None) is not None:
        ctx.store.add_event(run.id, "agent.reachable", "agent answers again", attempt=run.attempt)
    if _provider_says_gone(ctx, run, res, client, status):
        return
    poll_agent(ctx, run, client, status)
    if status.terminal:
        finishing.agent_finished(ctx, run, status)


def poll_agent(ctx: Context, run: Any, client: Any, status: AgentStatus) -> None:
    """Copy events and logs, cache the agent's status, note completed stages, update cost."""
    attempt = ctx.store.get_attempt(run.id, run.attempt)
    try:
        sync.sync_events(ctx, run.id, run.attempt, client, attempt.events_cursor or 0)
        sync.sync_logs(ctx, run.id, run.attempt, client)
    except AgentError as e:
        log.info("run %s: sync interrupted: %s", run.id, e.message)
    done = status.succeeded_stages()
    completed = list(run.completed_stages or [])
    new = [s for s in done if s not in completed]
    fields: dict[str, Any] = {}
    if new:
        fields["completed_stages"] = completed + new
    data = dict(attempt.data or {})
    data["status"] = status.as_dict()
    ctx.store.update_attempt(run.id, run.attempt, data=data)
    fields["cost_usd"] = finishing.run_cost(ctx, run.id)
    ctx.store.update_run(run.id, **fields)


def _agent_unreachable(ctx: Context, run: Any, res: Any, memo_key: str, err: Exception) -> None:
    try:
        _, st = _refresh_endpoint(ctx, run, res)
    except ProviderError as e:
        log.warning("run %s: agent and provider both unreachable: %s", run.id, e.message)
        return
    if st.state.gone:
        finishing.attempt_lost(ctx, run, st.state, st.detail)
        return
    first = ctx.memo.setdefault(memo_key, ctx.clock())
    if (
        ctx.clock() - first
    ).total_seconds() > ctx.settings.unreachable_grace_s and not ctx.memo.get(memo_key + ":noted"):
        ctx.memo[memo_key + ":noted"] = True
        ctx.store.add_event(
            run.id,
            "agent.unreachable",
            f"agent has not answered for {ctx.settings.unreachable_grace_s:.0f}s "
            f"but {res.provider} reports the machine {st.state.value}: waiting",
            attempt=run.attempt,
        )


def _provider_says_gone(ctx: Context, run: Any, res: Any, client: Any, status: AgentStatus) -> bool:
    """The preemption watcher: every ``provider_poll_s`` ask the provider about a machine whose
    agent still answers. Preempted (a notice period): ask the agent for a graceful stop so the
    job checkpoints before the kill; the recovery follows when the agent reports its end.
    Terminated or failed under a live agent: the attempt is lost. True if the run moved on."""
    key = f"{run.id}:{run.attempt}:provider-polled"
    now = ctx.clock()
    last = ctx.memo.get(key)
    if last is not None and (now - last).total_seconds() < ctx.settings.provider_poll_s:
        return False
    ctx.memo[key] = now
    try:
        st = ctx.provider(res.provider).status(instance_of(res))
    except ProviderError as e:
        log.info("run %s: provider status failed: %s", run.id, e.message)
        return False
    if st.state == InstanceState.PREEMPTED:
        if not status.terminal and not ctx.memo.get(key + ":stop"):
            ctx.memo[key + ":stop"] = True
            why = f"{res.provider} is preempting the machine: stopping gracefully"
            ctx.store.add_event(run.id, "instance.preempting", why, attempt=run.attempt)
            try:
                client.stop(StopCause.PREEMPTION, why)
            except AgentError:
                pass
        return False
    if st.state in (InstanceState.TERMINATED, InstanceState.FAILED):
        finishing.attempt_lost(ctx, run, st.state, st.detail)
        return True
    return False
