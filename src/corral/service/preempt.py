"""Preempting a run's machine on request, the way a spot market would (``corral debug
preempt``), so that the controller's recovery can be exercised and watched."""

from __future__ import annotations

from corral.control.nudges import nudge
from corral.errors import BadInput, Conflict, UnsupportedCapability
from corral.providers.base import Instance, SupportsSimulatedPreemption
from corral.providers.registry import get_provider
from corral.service._store import using
from corral.service.views import Preemption
from corral.store import ResourceRecord, RunRecord, Store


def active_instance(store: Store, run: RunRecord) -> tuple[ResourceRecord, Instance]:
    """(resource, Instance) of the machine the run's current attempt runs on.

    Conflict when the run is finished or has no launched machine right now."""
    if run.terminal:
        raise Conflict(f"run {run.id} is {run.state}: it has no machine to preempt")
    for res in store.resources(run_id=run.id, open_only=True):
        if res.attempt == run.attempt and res.state == "active" and res.instance:
            return res, Instance.model_validate(res.instance)
    raise Conflict(
        f"run {run.id} ({run.state}, attempt {run.attempt}) has no launched machine to preempt"
    )


def preempt_run(ref: str, *, grace: float = 5.0, store: Store | None = None) -> Preemption:
    """Preempt the machine of the run's current attempt through its provider: SIGTERM, then
    SIGKILL after ``grace`` seconds. The controller is asked to look at the run at once
    (``control.nudges``) and recovers it. UnsupportedCapability (with the provider's reason) when the provider cannot."""
    if grace < 0:
        raise BadInput(f"grace must be >= 0 seconds, not {grace!r}")
    with using(store) as st:
        run = st.get_run(ref)
        res, instance = active_instance(st, run)
    provider = get_provider(res.provider)
    if not isinstance(provider, SupportsSimulatedPreemption):
        reason = type(provider).unsupported.get(
            SupportsSimulatedPreemption.__name__, "it has no way to preempt a machine on request"
        )
        raise UnsupportedCapability(provider.name, "simulated preemption", reason)
    # the controller is asked to look at the run now, and again once the provider is done
    # (which may wait for the machine's processes: an agent serves until the controller has
    # read its last events), so it looks at the fast pace through the stop, not at its next
    # quiet look
    nudge(run.id)
    provider.preempt(instance, grace=grace)
    nudge(run.id)
    state = provider.status(instance)
    return Preemption(
        run_id=run.id,
        attempt=run.attempt,
        provider=res.provider,
        instance_id=instance.instance_id,
        key=instance.key,
        grace_s=grace,
        instance_state=state.state.value,
        detail=state.detail,
    )
