"""PENDING/RECOVERING -> PROVISIONING: pick the cheapest available offer and launch it.

Restart safety, in order:
1. the run is claimed with a compare-and-set transition to PROVISIONING (only one process - the
   controller or the CLI - launches a given attempt);
2. a resource row (``intent``) with the idempotency key is written BEFORE the provider call;
3. the provider call is idempotent on that key, so a process that dies anywhere after step 2
   is followed by one that calls ``launch`` again with the same key and gets the same instance.

The claim is applied here (it must be in the store before step 2); every other move of the
run is returned as a :class:`~corral.control.transitions.Transition` for the caller to apply.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from itertools import count
from typing import Any

from corral.control import planner, shipping, transitions
from corral.control.context import Context, log
from corral.control.interval import interruption_rate
from corral.control.plan_builder import build_plan
from corral.control.resources import instance_of, open_resources, rank_of
from corral.control.strategies import get_strategy
from corral.control.tokens import agent_token
from corral.control.transitions import Note, Transition
from corral.errors import (
    AgentError,
    Conflict,
    CorralError,
    MaybeLaunched,
    NoBalance,
    NoCapacity,
    NotFound,
    ProviderError,
)
from corral.providers.base import Bootstrap, ImageRef, Offer, SupportsGangs
from corral.providers.common import wheel
from corral.secrets import register_names, resolve_many
from corral.spec import JobSpec
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState, RunState
from corral.wire.env import ENV_SECRET_NAMES
from corral.wire.gang import GangRole


class Launch(enum.StrEnum):
    """What became of one launch call."""

    #: the provider returned an instance
    LAUNCHED = "launched"
    #: this offer cannot be had: try the next one, or wait
    NEXT = "next"
    #: no offer of this provider can be had now (its account cannot pay): try the next
    #: provider's offers, or wait
    NEXT_PROVIDER = "next_provider"
    #: the call may have taken effect: the intent stays and the same key is launched again
    PENDING = "pending"
    #: the launch can never succeed (bad input such as a missing workdir)
    FATAL = "fatal"


def attempt_key(run_id: str, attempt: int, try_index: int = 0) -> str:
    return f"{run_id}-a{attempt}" + (f"-{try_index + 1}" if try_index else "")


def _offer_text(offer: Offer) -> str:
    gpus = f"{offer.gpu_count}x {offer.gpu_type}" if offer.gpu_count else "no GPU"
    kind = "spot" if offer.spot else "on-demand"
    return f"{offer.provider}/{offer.region} {gpus} {kind} ${offer.price_per_hour:.2f}/h"


def _note_waiting(ctx: Context, run: RunRecord, reason: str) -> None:
    """Record why the run waits; one event per distinct reason, not one per tick."""
    if run.reason != reason:
        ctx.store.update_run(run.id, reason=reason)
        ctx.store.add_event(run.id, "run.waiting", reason)


def next_attempt(
    ctx: Context,
    run: RunRecord,
    planned: planner.Plan | None = None,
    kept: Sequence[ResourceRecord] = (),
) -> Transition | None:
    """Plan the next attempt of a PENDING or RECOVERING run, claim it and launch it. Returns
    the run's next move (a failure when no provider can ever run it, back to waiting when no
    offer had capacity), None when it launched or waits. ``planned``: the plan the caller
    just made for this very spec (``corral launch`` plans once, to refuse an infeasible job,
    and launches the first attempt on that plan). ``kept``: the nodes of the ended attempt's
    gang that the next one keeps (a repair: only the others are launched, on their offer)."""
    if kept:
        return _repair(ctx, run, kept)
    spec = ctx.spec(run)
    result = planned or planner.plan(ctx.providers, planner.requirements_from_spec(spec))
    if not result.offers:
        why = result.explain() or "no provider is enabled"
        if run.state == RunState.PENDING:
            reason = f"no provider can run this job: {why}"
            return Transition(
                RunState.FAILED,
                reason,
                expect=frozenset({RunState.PENDING}),
                events=(
                    Note(
                        "run.finished",
                        f"failed: {reason}",
                        data={"state": "FAILED", "cost_usd": 0.0},
                        attempt=None,
                    ),
                ),
            )
        _note_waiting(ctx, run, f"waiting for an offer: {why}")
        return None
    offers = result.available
    if offers and run.state == RunState.RECOVERING:
        offers = get_strategy(spec.recovery.strategy).order(offers, ctx.store.attempts(run.id))
    if not offers:
        _note_waiting(
            ctx,
            run,
            "waiting for capacity: "
            + ", ".join(
                o.details.get("unavailable_reason", f"{o.provider} has no free capacity")
                for o in result.offers[:3]
            ),
        )
        return None
    number = run.attempt + 1
    nodes = spec.resources.nodes
    gang = f" x{nodes} nodes" if nodes > 1 else ""
    claim = Transition(
        RunState.PROVISIONING,
        f"launching attempt {number} on {_offer_text(offers[0])}{gang}",
        fields={"attempt": number, "provider": offers[0].provider},
        event_data={"attempt": number, "offer": offers[0].model_dump(mode="json")},
    )
    claimed = transitions.apply(ctx, run, claim)
    if claimed is None:
        return None  # someone else (the CLI or another controller) claimed it first
    return launch_offers(ctx, claimed, offers)


def _bootstrap(
    ctx: Context, run: RunRecord, number: int, offer: Offer, role: GangRole | None = None
) -> Bootstrap:
    """The bootstrap of attempt ``number`` on ``offer``: the plan, built once here from the
    spec and the offer's provider's node contribution, the agent's token and the job's
    secrets; ``role``: the node's place in the attempt's gang (its agent's environment)."""
    spec = ctx.spec(run)
    profile = ctx.provider(offer.provider).node_profile(offer, run.id)
    # a node of its own gets the code shipped (packed once per run; put in the run's object
    # storage once; BadInput for a workdir over code.max_size, before any machine is rented)
    code = (
        shipping.code_plan(
            ctx.store, run.id, spec, ctx.home, attempt=number, inline_max=profile.inline_code_max
        )
        if (profile.workdir)
        else None
    )
    rate = interruption_rate(ctx.store, offer.provider, profile.interruptions_per_hour)
    plan = build_plan(
        spec,
        run_id=run.id,
        attempt=number,
        offer=gang_offer(offer, spec.resources.nodes),
        skip_stages=list(run.completed_stages or []),
        cost_offset_usd=float(run.cost_usd or 0.0),
        spec_hash=run.spec_hash,
        controller_timeout_s=ctx.settings.agent_controller_timeout_s,
        profile=profile,
        code=code,
        interruptions_per_hour=rate.per_hour if rate is not None else None,
    )

    # spec `secrets:` go to the job through the bootstrap env only (never the plan, the run
    # row or an event); a missing one fails the launch (BadInput naming it) before any call;
    # so does the git token of a shipped git source (the node clones with it)
    names = list(spec.secrets)
    if code is not None and code.git is not None and spec.code.token_secret:
        names.append(spec.code.token_secret)
    register_names(names)
    env = ctx.resolve_secrets(names)
    if env:
        env[ENV_SECRET_NAMES] = ",".join(sorted(env))  # the agent masks them in stage logs
    # a node that may lack corral installs this very version: the controller's own wheel
    # through the run's storage, else the same version from an index
    install = (
        wheel.node_install_env(shipping.storage_of(spec), ctx.home / "wheels")
        if profile.install_corral
        else {}
    )
    return Bootstrap(
        plan=plan,
        token=agent_token(run.id, number, ctx.home),
        env={**env, **role.env()} if role is not None else env,
        gang=role,
        image=image_ref(spec, ctx),
        install=install,
        priority=spec.priority,
        max_runtime_s=spec.limits.max_runtime,
    )


def image_ref(spec: JobSpec, ctx: Context | None = None) -> ImageRef | None:
    """The spec's image with its registry password from the secret store (for the provider
    only: never in the plan, the node's env, the store or an event); ``ctx``: a context whose
    process already resolved it."""
    if not spec.image:
        return None
    auth = spec.image_auth
    if auth is None:
        return ImageRef(name=spec.image)
    register_names([auth.password_secret])
    names = [auth.password_secret]
    password = (ctx.resolve_secrets(names) if ctx else resolve_many(names))[auth.password_secret]
    return ImageRef(
        name=spec.image, username=auth.username, password=password, registry=auth.registry
    )


def gang_offer(offer: Offer, nodes: int) -> Offer:
    """``offer`` as the whole gang's: its price for ``nodes`` machines (what the attempt is
    billed and the job's cost meter counts: every node from its start)."""
    if nodes <= 1:
        return offer
    return offer.model_copy(update={"price_per_hour": offer.price_per_hour * nodes})


def _ensure_attempt(ctx: Context, run: RunRecord, number: int, offer: Offer) -> None:
    offer = gang_offer(offer, ctx.spec(run).resources.nodes)
    offer_json = offer.model_dump(mode="json")
    try:
        ctx.store.get_attempt(run.id, number)
    except NotFound:
        try:
            ctx.store.create_attempt(
                run.id,
                number,
                provider=offer.provider,
                offer=offer_json,
                price_per_hour=offer.price_per_hour,
            )
            return
        except Conflict:
            pass  # created meanwhile by another launcher of this attempt (same key: one machine)
    ctx.store.update_attempt(
        run.id,
        number,
        state="provisioning",
        exit_reason=None,
        ended_at=None,
        started_at=ctx.clock(),
        provider=offer.provider,
        offer=offer_json,
        price_per_hour=offer.price_per_hour,
    )


def launch_offers(ctx: Context, run: RunRecord, offers: list[Offer]) -> Transition | None:
    """Try ``offers`` in order for the run's current attempt (a PROVISIONING run). None once
    one launched (or its outcome is pending); otherwise the run's next move: failed (the
    launch can never succeed) or back to waiting, reusing this attempt number next time."""
    number = run.attempt
    reasons = []
    # an attempt number reused after no capacity must not reuse a key whose machine is gone
    gone = {r.key for r in ctx.store.resources(run_id=run.id) if r.state == ResourceState.GONE}
    tries = (k for k in (attempt_key(run.id, number, i) for i in count()) if k not in gone)
    skipped: set[str] = set()  # providers whose account cannot pay: none of their offers
    for i, offer in enumerate(offers):
        if offer.provider in skipped:
            continue
        key = next(tries)  # never runs out
        _ensure_attempt(ctx, run, number, offer)
        role = head_role(ctx, run, offer)
        data: dict[str, Any] = {"offer": offer.model_dump(mode="json")}
        if role is not None:
            data.update(rank=0, gang_port=role.master_port)
        ctx.store.record_intent(
            run_id=run.id, attempt=number, provider=offer.provider, key=key, data=data
        )
        ctx.store.update_resource(key, state=ResourceState.INTENT)
        result, failure = launch_key(ctx, run, number, key, offer, role)
        if result == Launch.LAUNCHED and role is not None:
            return launch_members(ctx, run, number)
        if result in (Launch.LAUNCHED, Launch.PENDING):
            return None
        if result == Launch.FATAL:
            return failure
        if result == Launch.NEXT_PROVIDER:
            skipped.add(offer.provider)
            left = sum(1 for o in offers[i + 1 :] if o.provider == offer.provider)
            reasons.append(f"{offer.provider}: no balance ({left} more of its offers not tried)")
            continue
        reasons.append(f"{offer.provider}: no capacity")
    return back_to_waiting(ctx, run, reasons)


def back_to_waiting(ctx: Context, run: RunRecord, reasons: list[str]) -> Transition:
    """Nothing could be had for the current attempt: PENDING (or RECOVERING after a first
    attempt) again, with this attempt number reused next time."""
    number = run.attempt
    ctx.store.update_attempt(
        run.id, number, state="no_capacity", exit_reason="no_capacity", ended_at=ctx.clock()
    )
    back = RunState.RECOVERING if (run.attempt or 0) > 1 else RunState.PENDING
    return Transition(
        back,
        "waiting for capacity: " + "; ".join(reasons),
        expect=frozenset({RunState.PROVISIONING}),
        fields={"attempt": number - 1},
    )


def launch_key(
    ctx: Context,
    run: RunRecord,
    number: int,
    key: str,
    offer: Offer,
    role: GangRole | None = None,
) -> tuple[Launch, Transition | None]:
    """Call the provider for one resource key (``role``: the node's place in a gang).
    Idempotent; safe to repeat after a crash.

    Returns what became of the call (:class:`Launch`) and, for FATAL, the run's failure to
    apply (the resource row is closed: nothing was launched).
    """
    provider = ctx.provider(offer.provider)
    try:
        instance = provider.launch(offer, _bootstrap(ctx, run, number, offer, role), key)
    except NoCapacity as e:
        log.info("run %s: %s has no capacity: %s", run.id, offer.provider, e.message)
        ctx.store.update_resource(key, state=ResourceState.GONE)
        ctx.store.add_event(
            run.id,
            "provider.no_capacity",
            e.message,
            attempt=number,
            data={"provider": offer.provider, "offer_id": offer.offer_id},
        )
        return Launch.NEXT, None
    except ProviderError as e:
        if isinstance(e, MaybeLaunched):
            # the request may have reached the provider: the key stays an intent and is
            # launched again (idempotently) after intent_grace_s, never abandoned to a leak
            ctx.store.add_event(
                run.id,
                "provider.error",
                f"{e.message} (will retry the same key)",
                attempt=number,
                data={"provider": offer.provider, "code": e.code},
            )
            return Launch.PENDING, None
        ctx.store.update_resource(key, state=ResourceState.GONE)
        ctx.store.add_event(
            run.id,
            "provider.error",
            e.message,
            attempt=number,
            data={"provider": offer.provider, "code": e.code},
        )
        return (Launch.NEXT_PROVIDER if isinstance(e, NoBalance) else Launch.NEXT), None
    except CorralError as e:  # the plan itself is wrong: no retry can fix it
        ctx.store.update_resource(key, state=ResourceState.GONE)
        failure = transitions.finish(
            RunState.FAILED,
            f"launch failed: {e.message}",
            graceful=False,
            expect=frozenset({RunState.PROVISIONING}),
        )
        return Launch.FATAL, failure
    ctx.store.update_resource(
        key,
        state=ResourceState.ACTIVE,
        instance_id=instance.instance_id,
        instance=instance.model_dump(mode="json"),
    )
    node = role.rank if role is not None else 0
    if node == 0:  # the head is the attempt's machine
        ctx.store.update_attempt(
            run.id,
            number,
            instance_id=instance.instance_id,
            endpoint=instance.endpoint,
            state="provisioning",
        )
    data: dict[str, Any] = {"provider": offer.provider, "instance_id": instance.instance_id}
    if role is not None:
        data["node"] = node
    ctx.store.add_event(
        run.id,
        "instance.launched",
        f"{_offer_text(offer)}: {instance.instance_id}" + (f" (node {node})" if role else ""),
        attempt=number,
        data=data,
    )
    return Launch.LAUNCHED, None


# --- gangs (docs/multinode.md) ------------------------------------------------------------


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
    machine: its address is what the node needs)."""
    inst = instance_of(head)
    port = head.data.get("gang_port")
    provider = ctx.provider(head.provider)
    if inst is None or not isinstance(port, int) or not isinstance(provider, SupportsGangs):
        return None
    return GangRole(rank=rank, master_addr=provider.gang_address(inst), master_port=port)


def launch_members(ctx: Context, run: RunRecord, number: int) -> Transition | None:
    """Launch every node of the current attempt's gang that has no machine yet (its head
    launched), and hand the attempt over to every node kept from the last one (a repair):
    None once each launched or waits on its idempotent retry; the gang given up
    (:func:`gang_incomplete`) when a node cannot be had."""
    head = next(
        (r for r in open_resources(ctx, run) if rank_of(r) == 0 and r.attempt == number), None
    )
    if head is None or head.state != ResourceState.ACTIVE:
        return None
    offer = Offer.model_validate(head.data["offer"])
    have = {rank_of(r): r for r in open_resources(ctx, run) if r.attempt == number}
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
        role = member_role(ctx, head, rank)
        if role is None:
            return None
        key = member_key(head.key, rank)
        ctx.store.record_intent(
            run_id=run.id,
            attempt=number,
            provider=offer.provider,
            key=key,
            data={"offer": offer.model_dump(mode="json"), "rank": rank},
        )
        result, failure = launch_key(ctx, run, number, key, offer, role)
        if result == Launch.FATAL:
            return failure
        if result in (Launch.NEXT, Launch.NEXT_PROVIDER):
            nodes = ctx.spec(run).resources.nodes
            return gang_incomplete(
                ctx, run, f"node {rank} of {nodes} could not be had on {_offer_text(offer)}"
            )
    return None


#: a kept node's row: the attempt it was kept from (its agent's token until the hand-over)
KEPT_FROM = "kept_from"


def node_key(run_id: str, number: int, rank: int) -> str:
    """The resource key of node ``rank`` of attempt ``number``'s gang (rank 0: the attempt's
    own key)."""
    key = attempt_key(run_id, number)
    return member_key(key, rank) if rank else key


def _repair(ctx: Context, run: RunRecord, kept: Sequence[ResourceRecord]) -> Transition | None:
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
        f"and launches node(s) {', '.join(map(str, lost))} on {_offer_text(offer)}",
        fields={"attempt": number, "provider": offer.provider},
        event_data={"attempt": number, "kept": ranks, "launched": lost},
    )
    claimed = transitions.apply(ctx, run, claim)
    if claimed is None:
        return None
    _ensure_attempt(ctx, claimed, number, offer)
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
        result, failure = launch_key(ctx, claimed, number, key, offer, role)
        if result == Launch.FATAL:
            return failure
        if result in (Launch.NEXT, Launch.NEXT_PROVIDER):
            return gang_incomplete(
                ctx, claimed, f"node 0 of {nodes} could not be had on {_offer_text(offer)}"
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
    was kept from's token), once the head's address is known; noted as handed once its agent
    answers for attempt ``number``."""
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
    try:  # the node's agent for this attempt answers: it took it
        ctx.agent(run.id, number, inst.endpoint).status()
        notes.handed.add(rank)
        return
    except AgentError:
        pass
    boot = _bootstrap(ctx, run, number, offer, role)
    try:
        ctx.agent(run.id, int(row.data[KEPT_FROM]), inst.endpoint).hand_over(
            boot.plan, boot.token, role
        )
    except AgentError as e:
        log.info("run %s: node %d did not take attempt %d yet: %s", run.id, rank, number, e)
        return
    # handed once its new agent answers with the new token (a later look): until then the
    # old one may still answer, and a second hand-over is refused by either
    ctx.store.add_event(
        run.id,
        "gang.handed_over",
        f"node {rank} ({inst.instance_id}) runs attempt {number}",
        attempt=number,
        data={"node": rank, "instance_id": inst.instance_id},
    )


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
