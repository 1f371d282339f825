"""One machine's launch for an attempt: its bootstrap (the plan, built here from the spec and
the provider's node contribution, the agent's token, the job's secrets), the attempt's row,
and the provider call for one resource key, idempotent on it (``launching`` chooses the
offers; ``gangs`` launches a gang's other nodes with this, all at once)."""

from __future__ import annotations

import enum
from typing import Any

from corral.control import shipping, transitions
from corral.control.bell import published
from corral.control.context import Context, log
from corral.control.interval import interruption_rate
from corral.control.plan_builder import build_plan
from corral.control.tokens import agent_token
from corral.control.transitions import Transition
from corral.errors import (
    Conflict,
    CorralError,
    MaybeLaunched,
    NoBalance,
    NoCapacity,
    NotFound,
    ProviderError,
)
from corral.providers.base import Bootstrap, ImageRef, Offer
from corral.providers.common import wheel
from corral.secrets import register_names, resolve_many
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import ResourceState, RunState
from corral.wire.bell import ENV_AGENT_BELL
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


def offer_text(offer: Offer) -> str:
    gpus = f"{offer.gpu_count}x {offer.gpu_type}" if offer.gpu_count else "no GPU"
    kind = "spot" if offer.spot else "on-demand"
    return f"{offer.provider}/{offer.region} {gpus} {kind} ${offer.price_per_hour:.2f}/h"


def bootstrap(
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
    # the agent rings it once up (a gang's last node heard at once): this controller's, or,
    # launched by another process (`corral launch`), the bell of the controller serving home
    bell_at = ctx.bell.header() if ctx.bell is not None else published(ctx.home)
    if bell_at:
        env[ENV_AGENT_BELL] = bell_at
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


def ensure_attempt(ctx: Context, run: RunRecord, number: int, offer: Offer) -> None:
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
        instance = provider.launch(offer, bootstrap(ctx, run, number, offer, role), key)
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
        f"{offer_text(offer)}: {instance.instance_id}" + (f" (node {node})" if role else ""),
        attempt=number,
        data=data,
    )
    return Launch.LAUNCHED, None
