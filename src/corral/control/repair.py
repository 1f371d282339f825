"""Repairing a gang: when some nodes of a multi-node attempt are lost, the ones that survived
are kept for the next attempt and only the lost ones are launched again (docs/multinode.md).

The decision is taken once per ended attempt, when its recovery begins, and kept with the
attempt (``attempts.data["keep_nodes"]``: the resource keys of the survivors), so a recovery
that takes several looks (a teardown the provider has not confirmed yet) never changes its
mind. A gang is repaired when its provider lets the survivors idle safely
(``SupportsGangs.keeps_members``), at least one node was lost (the provider says preempted or
gone) and every other node is there: its machine running and its agent reporting the ended
attempt. Anything else - no node lost (a job's own failure), a node whose state is not known,
the previous repair's gang never completed - relaunches the whole gang, and the recovery's
reason says why. The nodes the provider said were lost are kept with the attempt too
(``attempts.data["lost_nodes"]``), for the manifest's history of each node.
"""

from __future__ import annotations

from corral.control.context import Context, log
from corral.control.gang_history import LOST
from corral.control.gangs import KEPT_FROM
from corral.control.plan_builder import longest_grace
from corral.control.resources import instance_of, open_resources, rank_of
from corral.errors import AgentError, ProviderError
from corral.providers.base import SupportsGangs
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState
from corral.wire.machine import InstanceState
from corral.wire.outcome import StopCause

#: the attempt's data key of the survivors' resource keys (the decision, taken once)
KEEP = "keep_nodes"
#: the attempt's data key of why the gang is relaunched whole rather than repaired
RELAUNCH = "relaunch_why"


def kept_nodes(ctx: Context, run: RunRecord) -> list[ResourceRecord] | None:
    """The nodes of the run's ended attempt that the next attempt keeps ([]: none, the whole
    gang goes; None: not decided yet, a surviving node still stops its stages). Decided once
    for an attempt, then read back."""
    if not run.attempt or ctx.spec(run).resources.nodes <= 1:
        return []
    attempt = ctx.store.get_attempt(run.id, run.attempt)
    data = dict(attempt.data or {})
    rows = [r for r in open_resources(ctx, run) if r.state == ResourceState.ACTIVE]
    if KEEP not in data:
        decided = _decide(ctx, run, rows, attempt.exit_reason)
        if decided is None:
            return None
        keep, why, lost = decided
        data[KEEP] = [r.key for r in keep]
        if lost:
            data[LOST] = {str(rank): verdict for rank, verdict in sorted(lost.items())}
        if why:
            data[RELAUNCH] = why
        ctx.store.update_attempt(run.id, run.attempt, data=data)
        if why:  # said where the user looks (corral status shows the run's events)
            ctx.store.add_event(run.id, "gang.relaunched", why, attempt=run.attempt)
    keys = set(data[KEEP])
    return [r for r in rows if r.key in keys]


def _decide(
    ctx: Context, run: RunRecord, rows: list[ResourceRecord], exit_reason: str | None
) -> tuple[list[ResourceRecord], str | None, dict[int, str]] | None:
    """The survivors to keep, or none and why the gang is relaunched whole, and the nodes
    the provider said were lost (rank: ``preempted`` or ``lost``); None while a surviving
    node still runs its stages (asked to stop once, waited for as long as its stages' grace
    and ``Settings.stop_margin_s``)."""
    provider = ctx.providers.get(rows[0].provider) if rows else None
    if not isinstance(provider, SupportsGangs):
        return [], None, {}
    if exit_reason == "gang_incomplete":  # (a gang that never formed lost no node)
        repaired = any(KEPT_FROM in r.data for r in rows)
        why = "the repaired gang was not completed: the gang is relaunched whole"
        return [], why if repaired else None, {}
    lost: dict[int, str] = {}
    kept, busy, unknown = [], [], []
    for row in rows:
        state = _state(ctx, run, row)
        if state is None:
            unknown.append(rank_of(row))
        elif state == InstanceState.PREEMPTED or state.gone:
            lost[rank_of(row)] = "preempted" if state == InstanceState.PREEMPTED else "lost"
        elif state == InstanceState.PROVISIONING:  # its agent still runs the ended attempt
            busy.append(row)
        else:
            kept.append(row)
    ranks = {rank_of(r) for r in rows}
    for rank in range(ctx.spec(run).resources.nodes):
        if rank not in ranks:  # its row is already closed: its machine is gone
            lost[rank] = "lost"
    if unknown:
        why = f"node {unknown[0]}'s state is not known: the gang is relaunched whole"
        return [], why, lost
    if not lost:
        return [], None, {}  # no machine was lost: the gang starts afresh
    if not provider.keeps_members:
        why = f"{rows[0].provider} cannot keep a gang's nodes: the gang is relaunched whole"
        return [], why, lost
    if not ctx.settings.gang_repair:
        return [], "repairs are off (CORRAL_GANG_REPAIR=off): the gang is relaunched whole", lost
    if busy:
        if _wait_for(ctx, run, busy):
            return None
        ranks_text = ", ".join(str(rank_of(r)) for r in busy)
        return [], f"node(s) {ranks_text} did not stop in time: the gang is relaunched whole", lost
    return kept, None, lost


def _state(ctx: Context, run: RunRecord, row: ResourceRecord) -> InstanceState | None:
    """The node's machine state, RUNNING only when its agent also reports the attempt ended
    (a survivor that can take the next attempt); None when either cannot be known."""
    inst = instance_of(row)
    if inst is None:
        return None
    try:
        st = ctx.provider(row.provider).status(inst)
    except ProviderError as e:
        log.info("run %s: node %d: provider status failed: %s", run.id, rank_of(row), e)
        return None
    if st.state != InstanceState.RUNNING:
        return st.state
    if not inst.endpoint:
        return None
    try:
        ended = ctx.agent(run.id, run.attempt, inst.endpoint).status().terminal
    except AgentError:
        return None
    # (PROVISIONING stands for "running, its stages not ended yet": it cannot take the next
    # attempt until they have)
    return InstanceState.RUNNING if ended else InstanceState.PROVISIONING


def _wait_for(ctx: Context, run: RunRecord, busy: list[ResourceRecord]) -> bool:
    """Ask the surviving nodes still running the ended attempt's stages to stop them (once);
    True while they may still do so in time."""
    notes = ctx.notes(run.id).attempt(run.attempt)
    now = ctx.clock()
    if notes.survivors_asked_at is None:
        notes.survivors_asked_at = now
        for row in busy:
            inst = instance_of(row)
            if inst is None or not inst.endpoint:
                continue
            try:
                ctx.agent(run.id, run.attempt, inst.endpoint).stop(
                    StopCause.PREEMPTION, "a node of the gang was lost: the gang is repaired"
                )
            except AgentError as e:
                log.info("run %s: node %d: stop not delivered: %s", run.id, rank_of(row), e)
    bound = longest_grace(ctx.spec(run)) + ctx.settings.stop_margin_s
    return (now - notes.survivors_asked_at).total_seconds() <= bound


def relaunch_why(ctx: Context, run: RunRecord) -> str | None:
    """Why the run's ended attempt's gang is relaunched whole rather than repaired (None: it
    is repaired, or it was no gang that lost a node), as decided by :func:`kept_nodes`."""
    if not run.attempt:
        return None
    why = (ctx.store.get_attempt(run.id, run.attempt).data or {}).get(RELAUNCH)
    return why if isinstance(why, str) else None
