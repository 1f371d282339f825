"""PROVISIONING and RUNNING: follow the attempt through its provider and its agent.

The provider is the source of truth for "the machine is gone"; an unreachable agent alone is
never treated as a preemption or a crash (a slow agent is not a dead one). What the watchers
look after is theirs (``watchers.health``: unreachable agent, provision timeout;
``watchers.preemption``: the provider polled under a live agent); the handlers here move the
attempt along: relaunch an interrupted launch, RUNNING once the agent is ready, copy what the
agent knows, and its end.
"""

from __future__ import annotations

from corral.control import (
    finishing,
    gangs,
    launch_node,
    launching,
    machine_log,
    planner,
    shipping,
    sync,
    transitions,
)
from corral.control.context import Context, log
from corral.control.observe import Observation
from corral.control.resources import open_resources, rank_of
from corral.control.transitions import Note, Transition
from corral.errors import AgentError, ProviderError, WireVersionMismatch
from corral.providers.base import InstanceState, Offer
from corral.store.records import RunRecord
from corral.store.states import ResourceState, RunState


def _relaunch(ctx: Context, run: RunRecord) -> Transition | None:
    """A PROVISIONING run without a launched machine: repeat an interrupted launch with the
    same key (idempotent), or plan and launch again."""
    intents = [
        r
        for r in open_resources(ctx, run)
        if r.state == ResourceState.INTENT and rank_of(r) == 0  # a gang's other nodes: later
    ]
    if intents:
        r = intents[0]
        if (ctx.clock() - r.updated_at).total_seconds() < ctx.settings.intent_grace_s:
            return None  # another process (the CLI) may be inside that launch right now
        offer = Offer.model_validate(r.data["offer"])
        role = gangs.head_role(ctx, run, offer)
        if role is not None and isinstance(r.data.get("gang_port"), int):
            role = role.model_copy(update={"master_port": r.data["gang_port"]})
        result, failure = launch_node.launch_key(ctx, run, run.attempt, r.key, offer, role)
        if result in (launch_node.Launch.NEXT, launch_node.Launch.NEXT_PROVIDER):
            return launching.back_to_waiting(ctx, run, [])
        return failure
    if (ctx.clock() - run.updated_at).total_seconds() < ctx.settings.intent_grace_s:
        return None  # just claimed: the claimer (the CLI, a server) records its intent next
    offers = planner.plan(ctx.providers, planner.requirements_from_spec(ctx.spec(run))).available
    return launching.launch_offers(ctx, run, offers)


def handle_provisioning(ctx: Context, run: RunRecord, obs: Observation) -> Transition | None:
    if obs.resource is None:
        return _relaunch(ctx, run)
    try:
        st = obs.machine()
    except ProviderError as e:
        log.warning("run %s: provider status failed: %s", run.id, e.message)
        return None
    if st.state.gone:
        said = machine_log.keep(ctx, run, obs.resource)  # it never served: its console says why
        why = machine_log.cannot_boot(said or "")
        if why is not None:  # not relaunched: the next machine of that image would say the same
            return machine_log.failed(why)
        return finishing.attempt_lost(ctx, run, st.state, st.detail, st.limit)
    nodes = ctx.spec(run).resources.nodes
    gang = nodes > 1
    if gang and not obs.gang_ready:
        obs.soon(0.5)
        return None  # a gang runs once every node is ready (the gang watcher bounds the wait)
    try:
        ready = obs.ready()
    except WireVersionMismatch as e:  # no retry or recovery can fix this: say so, stop
        return transitions.finish(RunState.FAILED, e.message, graceful=False)
    if not ready:
        why = machine_log.boot_failure(ctx, run, obs.resource)
        if why is not None:  # said once on its console: no wait for the provision timeout
            return machine_log.failed(why)
        if st.look_again_s is not None:
            obs.soon(st.look_again_s)  # it is about to be ready: not a tick later
        return None  # the health watcher fails it after provision_timeout_s
    _send_code(ctx, run, obs)
    if gang and not gangs.start(ctx, run, obs.client()):
        obs.soon(0.5)
        return None  # every node holds its gang stages until it took the start
    provider = obs.resource.provider if obs.resource else run.provider
    return Transition(
        RunState.RUNNING,
        f"agent ready on {provider}",
        expect=frozenset({RunState.PROVISIONING}),
        attempt_fields={"state": "running", "running_at": ctx.clock()},
        events=(
            Note(
                "run.started",
                f"attempt {run.attempt} running" + (f" on {nodes} nodes" if gang else ""),
                data={"nodes": nodes} if gang else None,
            ),
        ),
    )


def _send_code(ctx: Context, run: RunRecord, obs: Observation) -> None:
    """A node that waits for its code gets it from now on, not a tick later."""
    try:
        shipping.upload_step(ctx, run, obs.client(), obs.status())
    except AgentError:
        pass  # the next tick asks again


def handle_running(ctx: Context, run: RunRecord, obs: Observation) -> Transition | None:
    if obs.resource is None:  # the resource row vanished: the instance is gone
        return finishing.attempt_lost(ctx, run, InstanceState.TERMINATED, "no open resource")
    try:
        status = obs.status()
    except WireVersionMismatch as e:
        return transitions.finish(RunState.FAILED, e.message, graceful=False)
    except AgentError:
        # the health and preemption watchers look after an agent that is silent; the next
        # look comes at the usual pace, not a belled run's quiet one: a ring this look could
        # not read (the attempt's end, a notice, on a loaded machine) may be the last one
        obs.soon(ctx.settings.poll_interval_s)
        return None
    state = sync.poll_state(ctx, run)
    shape = (status.phase, tuple((s.name, s.state) for s in status.stages))
    if state.shape is not None and shape != state.shape:
        obs.lively = True  # a stage started or ended, the phase moved: more may follow soon
    state.shape = shape
    status = sync.record_status(ctx, run, status)  # secret values masked
    if obs.pulled is not None and obs.pulled.more:  # more than one answer carries: at once
        obs.soon(0.0)
    shipping.upload_step(ctx, run, obs.client(), status)  # a node waiting for its code gets it
    if status.terminal:
        return finishing.agent_finished(ctx, run, status)
    return None
