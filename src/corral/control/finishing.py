"""Ending attempts and runs: what an attempt's end means for the run (recover or finish),
graceful stops, teardown until the provider confirms the machine is gone, cost, and the final
state.

A run reaches a terminal state only after every resource of it is confirmed gone, so a
SUCCEEDED/FAILED/... run never leaves a paid machine behind. Every move is returned as a
:class:`~corral.control.transitions.Transition`; the caller applies it.
"""

from __future__ import annotations

from datetime import datetime

from corral.control import gangs, launching, recovery, repair, sync, transitions
from corral.control.context import Context, log
from corral.control.cost import attempt_cost, record_stop_time, run_cost
from corral.control.resources import instance_of, live_resource, members, rank_of
from corral.control.transitions import Note, Transition
from corral.errors import AgentError, NotYetTerminated, ProviderError
from corral.providers.base import InstanceStatus
from corral.store.records import RunRecord
from corral.store.states import ResourceState, RunState
from corral.wire import outcome as outcomes
from corral.wire.machine import InstanceState
from corral.wire.outcome import AttemptOutcome, OutcomeKind
from corral.wire.status import AgentStatus, Phase, StageState


def agent_finished(ctx: Context, run: RunRecord, status: AgentStatus) -> Transition | None:
    """The agent reports its attempt over: succeed, stop, fail, or recover. For a stop or a
    failure the provider is asked too: a stop on a machine being preempted is a preemption,
    and a failure of a job its machine killed for going over a limit is that (not recovered).
    A gang's failure while one of its nodes does not answer waits (None) for that node's
    verdict, ``Settings.node_verdict_s`` at most: a node gone without notice makes the other
    ranks fail before its provider says it is gone."""
    machine: InstanceStatus | None = None
    if status.phase in (Phase.STOPPED, Phase.FAILED):
        res = live_resource(ctx, run)
        inst = instance_of(res)
        if res is not None and inst is not None:
            try:
                machine = ctx.provider(res.provider).status(inst)
            except ProviderError:
                machine = None
    if machine is not None and machine.limit and status.phase == Phase.FAILED:
        return end_attempt(ctx, run, outcomes.over_limit(machine.limit, status))
    if status.phase in (Phase.STOPPED, Phase.FAILED):
        lost = _lost_member(ctx, run)
        if lost is not None:  # the gang's ranks ended because a node went: that is the cause
            return end_attempt(ctx, run, lost)
        if status.phase == Phase.FAILED and awaits_verdict(ctx, run):
            return None
    outcome = outcomes.from_agent(status, machine.state if machine is not None else None)
    if outcome.kind == OutcomeKind.SUCCEEDED:
        return transitions.finish(
            RunState.SUCCEEDED, outcome.reason, graceful=False, attempt_outcome=outcome
        )
    if outcome.kind == OutcomeKind.STOPPED:
        return transitions.finish(
            RunState.STOPPED, outcome.reason, graceful=False, attempt_outcome=outcome
        )
    return end_attempt(ctx, run, outcome)


def _lost_member(ctx: Context, run: RunRecord) -> AttemptOutcome | None:
    """The outcome of a gang whose node other than the head the provider reports preempted or
    gone (None: every node is there, or the attempt has one node)."""
    for res in members(ctx, run):
        inst = instance_of(res)
        if inst is None or res.state != ResourceState.ACTIVE:
            continue
        try:
            st = ctx.provider(res.provider).status(inst)
        except ProviderError:
            continue
        if st.state == InstanceState.PREEMPTED or st.state.gone:
            where = f"node {rank_of(res)} ({inst.instance_id})"
            why = f"{where}: {st.detail or st.state.value}"
            return outcomes.from_machine(st.state, why, rank_of(res))
    return None


def awaits_verdict(ctx: Context, run: RunRecord, head_silent: bool = False) -> bool:
    """Whether a gang's failure waits for the verdict on a node whose agent does not answer
    (``head_silent``: the head's; its machine may be gone: then the failure is the loss's),
    for ``node_verdict_s`` at most since the first look that found one silent."""
    silent = [0] if head_silent else []
    for res in members(ctx, run):
        inst = instance_of(res)
        if inst is None or res.state != ResourceState.ACTIVE or not inst.endpoint:
            continue
        try:
            ctx.agent(run.id, run.attempt, inst.endpoint).status()
        except AgentError:
            silent.append(rank_of(res))
    if not silent:
        return False
    notes = ctx.notes(run.id).attempt(run.attempt)
    now = ctx.clock()
    if notes.node_unheard_at is None:
        notes.node_unheard_at = now
        ctx.store.add_event(
            run.id,
            "gang.node_silent",
            f"the gang's ranks failed while node(s) {', '.join(map(str, silent))} do not "
            f"answer: waiting up to {ctx.settings.node_verdict_s:.0f}s for the provider's "
            "verdict on them",
            attempt=run.attempt,
            data={"nodes": silent},
        )
    return (now - notes.node_unheard_at).total_seconds() < ctx.settings.node_verdict_s


def attempt_lost(
    ctx: Context,
    run: RunRecord,
    state: InstanceState,
    detail: str,
    limit: str | None = None,
    node: int | None = None,
) -> Transition:
    """The provider says the machine is gone while the run still needed it (``limit``: its
    job was killed for going over a limit of the machine first; ``node``: a gang's node)."""
    if limit:
        return end_attempt(ctx, run, outcomes.over_limit(limit))
    return end_attempt(ctx, run, outcomes.from_machine(state, detail, node))


def end_attempt(ctx: Context, run: RunRecord, outcome: AttemptOutcome) -> Transition:
    """An attempt failed or was preempted: recover into a new attempt, or fail the run. The
    outcome is counted as the attempt's own by the recovery limits."""
    kind, why, exit_code = outcome.kind.value, outcome.reason, outcome.exit_code
    decision = recovery.decide(
        ctx.spec(run),
        ctx.store.attempts(run.id),
        run.attempt,
        outcome.kind,
        exit_code,
        over_limit=outcome.over_limit,
        cannot_boot=outcome.cannot_boot,
    )
    if decision.recover:
        return Transition(
            RunState.RECOVERING,
            f"{why}; {decision.reason}",
            attempt_outcome=outcome,
            follow=True,
            events=(
                Note(
                    "run.recovering",
                    f"{why}; {decision.reason}",
                    data={"kind": kind, "exit_code": exit_code}
                    | ({"node": outcome.node} if outcome.node is not None else {}),
                ),
            ),
        )
    reason = why if outcome.kind == OutcomeKind.FAILED else f"{why}; {decision.reason}"
    return transitions.finish(
        RunState.FAILED,
        reason,
        graceful=False,
        attempt_outcome=outcome,
        exit_code=exit_code,
        failed_stage=outcome.failed_stage,
    )


def teardown(ctx: Context, run: RunRecord, keep: frozenset[str] = frozenset()) -> bool:
    """Terminate every open resource of the run but those in ``keep`` (a repaired gang's
    surviving nodes); True once the provider confirmed all gone."""
    all_gone = True
    for res in ctx.store.resources(run_id=run.id, open_only=True):
        if res.key in keep:
            continue
        inst = instance_of(res)
        if inst is None:  # intent never launched: ask the provider by key, then forget it
            try:
                inst = ctx.provider(res.provider).find(res.key)
            except ProviderError as e:
                log.warning("run %s: find %s failed: %s", run.id, res.key, e.message)
                all_gone = False
                continue
            if inst is None:
                young = (ctx.clock() - res.updated_at).total_seconds() < ctx.settings.intent_grace_s
                if young:  # a launch may still be in flight elsewhere: look again later
                    all_gone = False
                    continue
                ctx.store.update_resource(res.key, state=ResourceState.GONE)
                continue
        if res.state != ResourceState.TERMINATING:
            ctx.store.update_resource(res.key, state=ResourceState.TERMINATING)
        try:
            ctx.provider(res.provider).terminate(inst)
        except NotYetTerminated:
            all_gone = False
            continue
        except ProviderError as e:
            log.warning("run %s: terminate %s failed: %s", run.id, inst.instance_id, e.message)
            all_gone = False
            continue
        ctx.store.update_resource(res.key, state=ResourceState.GONE)
        ctx.store.add_event(
            run.id,
            "instance.terminated",
            f"{res.provider}: {inst.instance_id}",
            attempt=res.attempt,
        )
    return all_gone


def _final_sync(ctx: Context, run: RunRecord) -> None:
    """Before teardown: copy the agent's last events and logs, and note every stage the
    attempt completed, so that the next attempt skips it even when the stage ended after the
    last poll (a preemption within one tick of a stage's end)."""
    inst = instance_of(live_resource(ctx, run))
    if inst and inst.endpoint:
        try:
            sync.drain(ctx, run, ctx.agent(run.id, run.attempt, inst.endpoint))
        except AgentError:
            pass
    for res in members(ctx, run):  # a gang's other nodes: their last log lines
        node = instance_of(res)
        if node is None or not node.endpoint:
            continue
        try:
            client = ctx.agent(run.id, run.attempt, node.endpoint)
            sync.copy_node_logs(ctx, run, rank_of(res), client, rounds=16)
        except AgentError:
            pass
    _note_completed_stages(ctx, run)


def _note_completed_stages(ctx: Context, run: RunRecord) -> None:
    """Add to ``runs.completed_stages`` the stages whose ``stage.finished`` event of this
    attempt says succeeded (the events are in the store once synced, even when the agent no
    longer answers)."""
    if not run.attempt:
        return
    done = [
        str(e.data["stage"])
        for e in ctx.store.events(run.id, types=["stage.finished"])
        if e.attempt == run.attempt
        and e.data.get("state") == StageState.SUCCEEDED.value
        and e.data.get("stage")
    ]
    completed = list(ctx.store.get_run(run.id).completed_stages or [])
    new = [s for s in dict.fromkeys(done) if s not in completed]
    if new:
        ctx.store.update_run(run.id, completed_stages=completed + new)


def _close_attempt(ctx: Context, run: RunRecord) -> None:
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
        cost_usd=attempt_cost(a, now),
        state="ended",
    )
    if run.state == RunState.STOPPING and a.started_at is not None:
        _learn_stop_time(ctx, run, a.provider, now)


def _learn_stop_time(ctx: Context, run: RunRecord, provider: str, now: datetime) -> None:
    """How long this stop took, from the run entering STOPPING to the provider's confirmed
    teardown: what the budget watcher reserves for the next stop on ``provider``."""
    entered = [
        e.ts
        for e in ctx.store.events(run.id, types=["run.state"])
        if e.data.get("to") == "STOPPING"
    ]
    if entered:
        record_stop_time(ctx, provider, (now - entered[-1]).total_seconds())


def _waiting_for_graceful_stop(ctx: Context, run: RunRecord) -> bool:
    """True while the agent is still stopping its stages within the recorded deadline (its
    events and logs keep being copied meanwhile)."""
    if not run.attempt:
        return False
    a = ctx.store.get_attempt(run.id, run.attempt)
    deadline = (a.data or {}).get("stop_deadline")
    if not deadline or ctx.clock() >= datetime.fromisoformat(deadline):
        return False
    inst = instance_of(live_resource(ctx, run))
    if not inst or not inst.endpoint:
        return False
    try:
        status = sync.pull(ctx, run, ctx.agent(run.id, run.attempt, inst.endpoint)).status
    except AgentError:
        return False
    sync.record_status(ctx, run, status)
    return not status.terminal


def _release(ctx: Context, run: RunRecord) -> bool:
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


def handle_stopping(ctx: Context, run: RunRecord) -> Transition | None:
    """STOPPING: wait out a graceful stop, copy the last events and logs, tear down until the
    provider confirms, close the attempt's bill; then the terminal state the run was heading
    to (None while any of that is still under way)."""
    if _waiting_for_graceful_stop(ctx, run):
        return None
    _final_sync(ctx, run)
    if not teardown(ctx, run):
        return None
    _close_attempt(ctx, run)
    if not _release(ctx, run):
        return None
    final = RunState(run.outcome or RunState.FAILED)
    reason = run.reason
    if final == RunState.STOPPED and _served_to_the_end(ctx, run):
        final, reason = RunState.SUCCEEDED, f"services stopped ({run.reason})"
    cost = run_cost(ctx, run.id)
    return Transition(
        final,
        reason,
        expect=frozenset({RunState.STOPPING}),
        fields={"cost_usd": cost, "requested_action": None},
        events=(
            Note(
                "run.finished",
                f"{final.lower()}: {reason}",
                data={"state": str(final), "cost_usd": cost},
                attempt=None,
            ),
        ),
    )


def _served_to_the_end(ctx: Context, run: RunRecord) -> bool:
    """The agent ended the stopped attempt ``succeeded``: every stage but the service stages
    had succeeded, and the stop only ended the services (a serving run's normal end)."""
    if not run.attempt:
        return False
    status = (ctx.store.get_attempt(run.id, run.attempt).data or {}).get("status") or {}
    return status.get("phase") == Phase.SUCCEEDED.value and bool(status.get("services"))


def handle_recovering(ctx: Context, run: RunRecord) -> Transition | None:
    """RECOVERING: tear the ended attempt down, then plan and launch the next one (a gang
    that lost some nodes keeps the others: ``control.repair``)."""
    _final_sync(ctx, run)
    kept = repair.kept_nodes(ctx, run)
    if kept is None:  # a surviving node still stops its stages: looked at again soon
        return None
    if not teardown(ctx, run, frozenset(r.key for r in kept)):
        return None
    _close_attempt(ctx, run)
    cost = run_cost(ctx, run.id)
    if cost != run.cost_usd:  # (a gang waiting to form again is looked at each tick)
        run = ctx.store.update_run(run.id, cost_usd=cost)
    wait = gangs.retry_in(ctx, run)
    if wait > 0:  # the last gangs could not form: not again at once
        why = f"the gang could not form: trying again in {wait:.0f}s"
        if not (run.reason or "").startswith("the gang could not form: trying again"):
            ctx.store.update_run(run.id, reason=why)
        return None
    return launching.next_attempt(ctx, run, kept=kept, why=repair.relaunch_why(ctx, run))
