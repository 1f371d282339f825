"""A multi-node attempt's nodes (a gang, docs/multinode.md): launching the nodes other than the
head once it has an address, repairing a gang around its surviving nodes (they are kept and
take the next attempt: ``POST /attempt``), and giving up a gang that cannot be completed.

A gang is one attempt with one resource row per node (its rank in the row's data; the head,
rank 0, is the attempt's machine: ``control.resources``). Each node is launched like a lone
machine (``launch_node.launch_key``: the intent written first, the provider call idempotent on
the node's key), with its place in the gang (``wire.gang.GangRole``) in its bootstrap; the
nodes other than the head are launched at the same time once it has an address.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from corral.control import gang_history, launch_node, transitions
from corral.control.context import Context, log
from corral.control.resources import instance_of, open_resources, rank_of
from corral.control.transitions import Note, Transition
from corral.errors import AgentError
from corral.providers.base import Instance, Offer, SupportsGangs
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState, RunState
from corral.wire.gang import GangRole

if TYPE_CHECKING:
    from corral.control.agent_client import AgentClient


def member_key(head_key: str, rank: int) -> str:
    """The resource key of node ``rank`` of the gang whose head has ``head_key``."""
    return f"{head_key}-k{rank}"


def head_role(ctx: Context, run: RunRecord, offer: Offer) -> GangRole | None:
    """The head's place in a new gang of the run on ``offer`` (None: the job has one node):
    rank 0, meeting its own ranks on this machine, on the port the provider gives the gang."""
    nodes = ctx.spec(run).resources.nodes
    if nodes <= 1:
        return None
    provider = ctx.provider(offer.provider)
    assert isinstance(provider, SupportsGangs)  # the planner offers no other
    return GangRole(rank=0, master_addr="127.0.0.1", master_port=provider.gang_port(run.id))


def member_role(ctx: Context, head: ResourceRecord, rank: int) -> GangRole | None:
    """Node ``rank``'s place in the gang whose head is ``head`` (None until the head has a
    machine and the provider knows its address: what the node needs)."""
    inst = instance_of(head)
    port = head.data.get("gang_port")
    provider = ctx.provider(head.provider)
    if inst is None or not isinstance(port, int) or not isinstance(provider, SupportsGangs):
        return None
    addr = provider.gang_address(inst)
    if not addr:  # e.g. a queued head: no machine runs it yet
        return None
    return GangRole(rank=rank, master_addr=addr, master_port=port)


def launch_members(ctx: Context, run: RunRecord, number: int) -> Transition | None:
    """Launch every node of the current attempt's gang that has no machine yet (its head
    launched), and hand the attempt over to every node kept from the last one (a repair):
    None once each launched or waits on its idempotent retry; the gang given up
    (:func:`gang_incomplete`) when a node cannot be had.

    Every such node's intent is recorded first, then their provider calls go out together
    (:func:`_launch_together`): a gang of N is launched in about one call's time, not N. A
    process that dies among them leaves intents only, each launched again on its own key."""
    head = next(
        (r for r in open_resources(ctx, run) if rank_of(r) == 0 and r.attempt == number), None
    )
    if head is None or head.state != ResourceState.ACTIVE:
        return None
    offer = Offer.model_validate(head.data["offer"])
    have = {rank_of(r): r for r in open_resources(ctx, run) if r.attempt == number}
    meet: GangRole | None = None  # where every node meets the head (asked once)
    todo: list[tuple[int, str, GangRole]] = []
    for rank in range(ctx.spec(run).resources.nodes):
        row = have.get(rank)
        if row is not None and KEPT_FROM in row.data:
            _hand_over(ctx, run, number, row, head, offer)
            continue
        if rank == 0 or (row is not None and row.state != ResourceState.INTENT):
            continue
        if row is not None and (ctx.clock() - row.updated_at).total_seconds() < (
            ctx.settings.intent_grace_s
        ):
            continue  # another process may be inside that launch right now
        meet = meet or member_role(ctx, head, rank)
        if meet is None:
            return None
        key = member_key(head.key, rank)
        # a node never launched is launched by whoever writes its intent (the CLI that
        # launched the head and a controller's gang watcher may both get here: one provider
        # call and one instance.launched per node, not one per launcher); an intent left past
        # its grace is launched again on its key (idempotent)
        write = ctx.store.claim_intent if row is None else ctx.store.record_intent
        wrote = write(
            run_id=run.id,
            attempt=number,
            provider=offer.provider,
            key=key,
            data={"offer": offer.model_dump(mode="json"), "rank": rank},
        )
        if wrote is None:
            continue  # another launcher wrote it first: that one launches it
        todo.append((rank, key, meet.model_copy(update={"rank": rank})))
    outcomes = _launch_together(ctx, run, number, offer, todo)
    fatal = next((f for result, f in outcomes if result == launch_node.Launch.FATAL), None)
    if fatal is not None:
        return fatal
    for (rank, _, _), (result, _) in zip(todo, outcomes, strict=True):
        if result in (launch_node.Launch.NEXT, launch_node.Launch.NEXT_PROVIDER):
            nodes = ctx.spec(run).resources.nodes
            return gang_incomplete(
                ctx,
                run,
                f"node {rank} of {nodes} could not be had on {launch_node.offer_text(offer)}",
            )
    return None


def _launch_together(
    ctx: Context,
    run: RunRecord,
    number: int,
    offer: Offer,
    nodes: Sequence[tuple[int, str, GangRole]],
) -> list[tuple[launch_node.Launch, Transition | None]]:
    """``launch_node.launch_key`` for each (rank, key, role) of ``nodes`` (their intents
    recorded), at the same time: a thread each, at most ``Settings.gang_launch_workers``, of
    a pool of this call's own (a look on the controller's operations workers waits for them:
    their pool could be full of such looks). What became of each, in ``nodes``' order, once
    every call has returned; the first error raised, then."""
    if len(nodes) <= 1:
        return [
            launch_node.launch_key(ctx, run, number, key, offer, role) for _, key, role in nodes
        ]
    workers = max(1, min(len(nodes), ctx.settings.gang_launch_workers))
    with ThreadPoolExecutor(workers, thread_name_prefix="corral-gang-launch") as pool:
        calls = [
            pool.submit(launch_node.launch_key, ctx, run, number, key, offer, role)
            for _, key, role in nodes
        ]
    return [call.result() for call in calls]


#: a kept node's row: the attempt it was kept from (its agent's token until the hand-over)
KEPT_FROM = "kept_from"
#: the event of a kept node serving the attempt it was handed over
HANDED_OVER = "gang.handed_over"


def node_key(run_id: str, number: int, rank: int) -> str:
    """The resource key of node ``rank`` of attempt ``number``'s gang (rank 0: the attempt's
    own key)."""
    key = launch_node.attempt_key(run_id, number)
    return member_key(key, rank) if rank else key


def repair(ctx: Context, run: RunRecord, kept: Sequence[ResourceRecord]) -> Transition | None:
    """Claim the next attempt on the kept nodes' offer, move the kept nodes to it (their
    machines stay: a row of the new attempt each, the old rows closed), and launch the lost
    nodes only; the kept agents get the new attempt by :func:`launch_members`."""
    offer = Offer.model_validate(kept[0].data["offer"])
    nodes = ctx.spec(run).resources.nodes
    number = run.attempt + 1
    ranks = sorted(rank_of(r) for r in kept)
    lost = [k for k in range(nodes) if k not in ranks]
    claim = Transition(
        RunState.PROVISIONING,
        f"repairing the gang: attempt {number} keeps node(s) {', '.join(map(str, ranks))} "
        f"and launches node(s) {', '.join(map(str, lost))} on {launch_node.offer_text(offer)}",
        fields={"attempt": number, "provider": offer.provider},
        event_data={"attempt": number, "kept": ranks, "launched": lost},
    )
    claimed = transitions.apply(ctx, run, claim)
    if claimed is None:
        return None
    launch_node.ensure_attempt(ctx, claimed, number, offer)
    provider = ctx.provider(offer.provider)
    assert isinstance(provider, SupportsGangs)  # a gang was kept on it
    port = provider.gang_port(run.id)
    for row in kept:
        rank = rank_of(row)
        key = node_key(run.id, number, rank)
        data: dict[str, Any] = {"offer": row.data["offer"], "rank": rank, KEPT_FROM: row.attempt}
        if rank == 0:
            data["gang_port"] = port
        ctx.store.record_intent(
            run_id=run.id, attempt=number, provider=row.provider, key=key, data=data
        )
        ctx.store.update_resource(
            key, state=ResourceState.ACTIVE, instance_id=row.instance_id, instance=row.instance
        )
        ctx.store.update_resource(row.key, state=ResourceState.GONE)  # the machine is key's now
        inst = instance_of(row)
        if rank == 0 and inst is not None:
            ctx.store.update_attempt(
                run.id, number, instance_id=inst.instance_id, endpoint=inst.endpoint
            )
        ctx.store.add_event(
            run.id,
            "gang.node_kept",
            f"node {rank} kept: {row.instance_id}",
            attempt=number,
            data={"node": rank, "instance_id": row.instance_id},
        )
    if 0 in lost:
        key = node_key(run.id, number, 0)
        ctx.store.record_intent(
            run_id=run.id,
            attempt=number,
            provider=offer.provider,
            key=key,
            data={"offer": offer.model_dump(mode="json"), "rank": 0, "gang_port": port},
        )
        role = GangRole(rank=0, master_addr="127.0.0.1", master_port=port)
        result, failure = launch_node.launch_key(ctx, claimed, number, key, offer, role)
        if result == launch_node.Launch.FATAL:
            return failure
        if result in (launch_node.Launch.NEXT, launch_node.Launch.NEXT_PROVIDER):
            return gang_incomplete(
                ctx,
                claimed,
                f"node 0 of {nodes} could not be had on {launch_node.offer_text(offer)}",
            )
    return launch_members(ctx, claimed, number)


def _hand_over(
    ctx: Context,
    run: RunRecord,
    number: int,
    row: ResourceRecord,
    head: ResourceRecord,
    offer: Offer,
) -> None:
    """Give a kept node's agent attempt ``number`` (``POST /attempt`` with the attempt it
    was kept from's token), once the head's address is known; handed once its agent answers
    for attempt ``number`` with that attempt's token (:func:`_took`).

    Every look asks until then, with the same hand-over: the agent answers it again as it did
    the first time, before its switch and after it (``docs/agent.md``), so an answer lost on
    the way (a timeout under load) is only a look's delay, never a gang stranded on a node
    that took the attempt while the controller thought it refused."""
    notes = ctx.notes(run.id).attempt(number)
    rank = rank_of(row)
    inst = instance_of(row)
    if rank in notes.handed or inst is None or not inst.endpoint:
        return
    port = head.data.get("gang_port")
    if rank == 0 and isinstance(port, int):
        role: GangRole | None = GangRole(rank=0, master_addr="127.0.0.1", master_port=port)
    else:
        role = member_role(ctx, head, rank)
    if role is None:
        return
    if _took(ctx, run, number, rank, inst, inst.endpoint):
        return
    boot = launch_node.bootstrap(ctx, run, number, offer, role)
    try:
        ctx.agent(run.id, int(row.data[KEPT_FROM]), inst.endpoint).hand_over(
            boot.plan, boot.token, role
        )
    except AgentError as e:
        log.info("run %s: node %d did not take attempt %d yet: %s", run.id, rank, number, e)
        return
    # taken (now or before): handed once its agent for this attempt answers, a later look


def _took(
    ctx: Context, run: RunRecord, number: int, rank: int, inst: Instance, endpoint: str
) -> bool:
    """Whether the node's agent at ``endpoint`` serves attempt ``number`` (it answers with
    that attempt's token, for that attempt): then noted as handed, and said once
    (``gang.handed_over``, whichever look or controller saw it first)."""
    try:
        status = ctx.agent(run.id, number, endpoint).status()
    except AgentError:
        return False
    if status.attempt != number:
        return False
    ctx.notes(run.id).attempt(number).handed.add(rank)
    said = ctx.store.events(run.id, types=[HANDED_OVER])
    if not any(e.attempt == number and e.data.get("node") == rank for e in said):
        ctx.store.add_event(
            run.id,
            HANDED_OVER,
            f"node {rank} ({inst.instance_id}) runs attempt {number}",
            attempt=number,
            data={"node": rank, "instance_id": inst.instance_id},
        )
    return True


def gang_incomplete(ctx: Context, run: RunRecord, why: str) -> Transition:
    """The current attempt's gang cannot be completed: every node it has is released (the
    RECOVERING handler tears them down, billed until the provider confirms) and the run
    waits for the next gang, saying what was missing."""
    ctx.store.update_attempt(
        run.id, run.attempt, state="gang_incomplete", exit_reason="gang_incomplete"
    )
    reason = f"the gang was not completed: {why}; releasing its nodes"
    return Transition(
        RunState.RECOVERING,
        reason,
        expect=frozenset({RunState.PROVISIONING}),
        follow=True,
        events=(Note("gang.incomplete", reason, data={"attempt": run.attempt}),),
    )


#: the first wait before a gang is formed again after one could not be (doubled after each
#: gang in a row that could not form, up to :data:`GANG_RETRY_MAX_S`)
GANG_RETRY_S = 10.0
GANG_RETRY_MAX_S = 300.0


def retry_in(ctx: Context, run: RunRecord) -> float:
    """Seconds to wait before the run's next gang when its last ones could not form (0: go
    now): a provider that cannot form it is not asked again at once, each try billing its
    machines until the bound."""
    attempts = ctx.store.attempts(run.id)
    failed = 0
    for a in reversed(attempts):
        if a.exit_reason != "gang_incomplete":
            break
        failed += 1
    if not failed:
        return 0.0
    ended = attempts[-1].billed_until or attempts[-1].ended_at
    if ended is None:
        return 0.0
    wait = min(GANG_RETRY_MAX_S, GANG_RETRY_S * 2 ** (failed - 1))
    return max(0.0, wait - (ctx.clock() - ended).total_seconds())


def start(ctx: Context, run: RunRecord, head: AgentClient) -> bool:
    """Tell every node of the current attempt's gang that the gang is complete (``POST
    /gang/start``: their stages on several nodes start; with the gang's history, which the head
    writes into the manifest). True once every node took it; a node that did not is asked
    again at the next look (the call is idempotent)."""
    clients = [head]
    for row in open_resources(ctx, run):
        inst = instance_of(row)
        if rank_of(row) == 0 or row.attempt != run.attempt or inst is None:
            continue
        if not inst.endpoint:
            return False
        clients.append(ctx.agent(run.id, run.attempt, inst.endpoint))
    nodes = gang_history.history(ctx, run)  # for the manifest (node_attempts)
    try:
        for client in clients:
            client.start_gang(nodes)
    except AgentError as e:
        log.info("run %s: the gang's start not delivered yet: %s", run.id, e)
        return False
    return True
