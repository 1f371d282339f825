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

from collections.abc import Sequence
from itertools import count
from typing import Any

from corral.control import gangs, planner, transitions
from corral.control.context import Context
from corral.control.launch_node import (
    Launch,
    attempt_key,
    ensure_attempt,
    launch_key,
    offer_text,
)
from corral.control.strategies import get_strategy
from corral.control.transitions import Note, Transition
from corral.providers.base import Offer
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState, RunState


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
    why: str | None = None,
) -> Transition | None:
    """Plan the next attempt of a PENDING or RECOVERING run, claim it and launch it. Returns
    the run's next move (a failure when no provider can ever run it, back to waiting when no
    offer had capacity), None when it launched or waits. ``planned``: the plan the caller
    just made for this very spec (``corral launch`` plans once, to refuse an infeasible job,
    and launches the first attempt on that plan). ``kept``: the nodes of the ended attempt's
    gang that the next one keeps (a repair: only the others are launched, on their offer);
    ``why``: why its gang is relaunched whole instead (said in the claim's reason)."""
    if kept:
        return gangs.repair(ctx, run, kept)
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
        f"launching attempt {number} on {offer_text(offers[0])}{gang}"
        + (f" ({why})" if why else ""),
        fields={"attempt": number, "provider": offers[0].provider},
        event_data={"attempt": number, "offer": offers[0].model_dump(mode="json")},
    )
    claimed = transitions.apply(ctx, run, claim)
    if claimed is None:
        return None  # someone else (the CLI or another controller) claimed it first
    return launch_offers(ctx, claimed, offers)


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
        ensure_attempt(ctx, run, number, offer)
        role = gangs.head_role(ctx, run, offer)
        data: dict[str, Any] = {"offer": offer.model_dump(mode="json")}
        if role is not None:
            data.update(rank=0, gang_port=role.master_port)
        ctx.store.record_intent(
            run_id=run.id, attempt=number, provider=offer.provider, key=key, data=data
        )
        ctx.store.update_resource(key, state=ResourceState.INTENT)
        result, failure = launch_key(ctx, run, number, key, offer, role)
        if result == Launch.LAUNCHED and role is not None:
            return gangs.launch_members(ctx, run, number)
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
