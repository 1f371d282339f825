"""Which resource rows (the intent log) belong to a run's current attempt."""

from __future__ import annotations

from corral.control.context import Context
from corral.providers.base import Instance
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import ResourceState


def instance_of(resource: ResourceRecord | None) -> Instance | None:
    """The provider's instance recorded on a resource row (None for an ``intent`` row)."""
    if not resource or not resource.instance:
        return None
    return Instance.model_validate(resource.instance)


def open_resources(ctx: Context, run: RunRecord) -> list[ResourceRecord]:
    """The open rows (intent, active, terminating) of the run's current attempt."""
    return [
        r for r in ctx.store.resources(run_id=run.id, open_only=True) if r.attempt == run.attempt
    ]


def active_resource(ctx: Context, run: RunRecord) -> ResourceRecord | None:
    """The launched machine of the current attempt, while it is not being torn down."""
    for r in open_resources(ctx, run):
        if r.state == ResourceState.ACTIVE:
            return r
    return None


def live_resource(ctx: Context, run: RunRecord) -> ResourceRecord | None:
    """The machine of the current attempt, launched and not confirmed gone (it may be
    terminating): the one whose agent may still answer."""
    for r in open_resources(ctx, run):
        if r.state in (ResourceState.ACTIVE, ResourceState.TERMINATING):
            return r
    return None
