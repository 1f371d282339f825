"""The gang watcher: the other nodes of a multi-node attempt (``docs/multinode.md``)."""

from __future__ import annotations

from corral.control import finishing, gangs, shipping, sync
from corral.control.context import Context, log
from corral.control.notes import AttemptNotes
from corral.control.observe import Observation
from corral.control.plan_builder import longest_grace
from corral.control.resources import instance_of, members, rank_of
from corral.control.transitions import AskStop, Note, Step
from corral.control.watchers.base import Watcher
from corral.errors import AgentError, CorralError, ProviderError
from corral.providers.base import Instance, InstanceStatus
from corral.spec import JobSpec
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState, RunState
from corral.wire import outcome as outcomes
from corral.wire.machine import InstanceState
from corral.wire.outcome import StopCause
from corral.wire.status import Phase


class GangWatcher(Watcher):
    """The nodes of a gang other than its head (the head is the attempt's machine, which the
    other watchers and the handlers follow).

    * PROVISIONING: every node without a machine is launched (idempotently on its key, once
      the head has the address they meet at); a gang not every node of which is ready
      ``Settings.gang_timeout_s`` after the attempt began is released, saying how many were
      ready (``gangs.gang_incomplete``). A node's agent that waits for its code gets it. A
      node kept through a repair is ready once it took the attempt (``gangs``: its agent
      answers for it with its token; noted and said once), never before.
    * PROVISIONING and RUNNING: a node the provider reports gone ends the attempt as the head
      would (preempted, terminated, failed: recovered or failed by the recovery rules, the
      whole gang relaunched); a node being preempted asks the head's agent to stop gracefully
      (every rank checkpoints); a node whose agent reports its attempt failed fails the
      attempt, naming the node.

    Reset rules: none of its own; the "stop asked" mark is the attempt's, shared with the
    preemption watcher (a notice is acted on once, whichever node got it).
    """

    name = "gang"
    states = frozenset({RunState.PROVISIONING, RunState.RUNNING})

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        nodes = spec.resources.nodes
        if nodes <= 1 or obs.resource is None:
            return None
        if run.state == RunState.PROVISIONING:
            launched = gangs.launch_members(ctx, run, run.attempt)
            if launched is not None:
                return launched
        ready = 1 if _head_ready(ctx, run, obs) else 0
        looked = []
        for row in members(ctx, run):
            inst = instance_of(row)
            if inst is None or row.state != ResourceState.ACTIVE:
                continue  # launched above, or being torn down
            try:
                st = ctx.provider(row.provider).status(inst)
            except ProviderError as e:
                log.info("run %s: node %d: provider status failed: %s", run.id, rank_of(row), e)
                continue
            looked.append((row, _endpoint(ctx, row, inst, st), st))
        losing = any(_losing(st) for _, _, st in looked) or _head_losing(obs)
        for row, inst, st in looked:
            step = self._node(ctx, run, row, inst, st, obs, losing)
            if step is True:
                ready += 1
            elif step is not None and step is not False:
                return step
        obs.gang_ready = ready == nodes
        if run.state == RunState.PROVISIONING and ready < nodes:
            return _bound(ctx, run, ready, nodes, obs)
        return None

    def _node(
        self,
        ctx: Context,
        run: RunRecord,
        row: ResourceRecord,
        inst: Instance,
        st: InstanceStatus,
        obs: Observation,
        losing: bool,
    ) -> Step | bool | None:
        """One node's look: a step for the run, or whether its agent is ready. ``losing``: a
        node of the gang is being preempted or is gone (a rank failing meanwhile lost its
        peers: the lost node's end decides the attempt's outcome, not this failure)."""
        rank = rank_of(row)
        where = f"node {rank} ({inst.instance_id})"
        notes = ctx.notes(run.id).attempt(run.attempt)
        if st.state.gone:
            return _node_gone(ctx, run, rank, where, st, notes, obs)
        if st.state == InstanceState.PREEMPTED and run.state == RunState.RUNNING:
            if notes.preemption_stop_asked:
                return None
            notes.preemption_stop_asked = True
            why = f"{row.provider} is preempting {where}: stopping the gang gracefully"
            return AskStop(StopCause.PREEMPTION, why, Note("instance.preempting", why))
        if not inst.endpoint:
            return False
        kept = gangs.KEPT_FROM in row.data and rank not in notes.handed
        if run.state == RunState.PROVISIONING and kept:
            return False  # a kept node is ready once it took the attempt, as the head is
        client = ctx.agent(run.id, run.attempt, inst.endpoint)
        try:
            status = client.status()
        except AgentError:
            return False
        shipping.upload_step(ctx, run, client, status, node=rank)
        try:  # its stage logs, beside the head's (corral logs --node)
            sync.copy_node_logs(ctx, run, rank, client)
        except AgentError as e:
            log.info("run %s: node %d: logs not copied: %s", run.id, rank, e)
        if status.phase == Phase.FAILED and run.state == RunState.RUNNING and not losing:
            if finishing.awaits_verdict(ctx, run, head_silent=not obs.agent_answers()):
                obs.soon(1.0)
                return None  # a silent node may be gone: its verdict decides
            outcome = outcomes.from_agent(status, None)
            return finishing.end_attempt(
                ctx, run, outcome.model_copy(update={"reason": f"{where}: {outcome.reason}"})
            )
        return True


def _head_ready(ctx: Context, run: RunRecord, obs: Observation) -> bool:
    """The head's agent serves this attempt (a kept head: once it took it; until then its
    agent still answers /ready for the attempt it was kept from)."""
    if run.state != RunState.PROVISIONING:
        return True
    handed = ctx.notes(run.id).attempt(run.attempt).handed
    if obs.resource is not None and gangs.KEPT_FROM in obs.resource.data:
        return 0 in handed
    try:
        return obs.ready()
    except CorralError:
        return False  # the PROVISIONING handler says why


def _losing(st: InstanceStatus) -> bool:
    return st.state == InstanceState.PREEMPTED or st.state.gone


def _head_losing(obs: Observation) -> bool:
    """The head's machine is being preempted or is gone (False when that cannot be known)."""
    try:
        return _losing(obs.machine())
    except CorralError:
        return False


def _node_gone(
    ctx: Context,
    run: RunRecord,
    node: int,
    where: str,
    st: InstanceStatus,
    notes: AttemptNotes,
    obs: Observation,
) -> Step | None:
    """A node the provider reports gone. While the head's agent still runs its stages, it is
    asked to stop them gracefully first (its ranks save their parts of the checkpoint; rank 0
    writes its ``COMPLETE`` last): the attempt ends when it reports its end
    (``finishing.agent_finished`` names the lost node), or after the plan's grace and
    ``Settings.stop_margin_s`` without it."""
    why = f"{where}: {st.detail or st.state.value}"
    head_runs = run.state == RunState.RUNNING and obs.agent_answers() and not obs.status().terminal
    if not head_runs:
        return finishing.attempt_lost(ctx, run, st.state, why, st.limit, node)
    now = ctx.clock()
    if notes.node_lost_at is None:
        notes.node_lost_at = now
        notes.preemption_stop_asked = True
        said = f"{why}: stopping the gang's other ranks gracefully"
        cause = StopCause.PREEMPTION if st.state == InstanceState.PREEMPTED else StopCause.AGENT
        return AskStop(cause, said, Note("gang.node_lost", said))
    grace = longest_grace(ctx.spec(run)) + ctx.settings.stop_margin_s
    if (now - notes.node_lost_at).total_seconds() > grace:
        return finishing.attempt_lost(ctx, run, st.state, why, st.limit, node)
    obs.soon(1.0)
    return None


def _endpoint(ctx: Context, row: ResourceRecord, inst: Instance, st: InstanceStatus) -> Instance:
    """The node's instance with the agent's endpoint once the provider knows it (stored)."""
    if not st.endpoint or st.endpoint == inst.endpoint:
        return inst
    inst = inst.model_copy(update={"endpoint": st.endpoint})
    ctx.store.update_resource(row.key, instance=inst.model_dump(mode="json"))
    return inst


def _bound(ctx: Context, run: RunRecord, ready: int, nodes: int, obs: Observation) -> Step | None:
    """A forming gang past ``Settings.gang_timeout_s``: released, saying what was missing."""
    attempt = ctx.store.get_attempt(run.id, run.attempt)
    if attempt.started_at is None:
        return None
    bound = min(ctx.settings.gang_timeout_s, ctx.settings.provision_timeout_s)
    waited = (ctx.clock() - attempt.started_at).total_seconds()
    if waited <= bound:
        obs.soon(min(1.0, bound - waited))  # a forming gang is looked at often
        return None
    return gangs.gang_incomplete(
        ctx,
        run,
        f"{ready} of {nodes} nodes ready after {waited:.0f}s "
        f"(the bound is {bound:.0f}s: CORRAL_GANG_TIMEOUT)",
    )
