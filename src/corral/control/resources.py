"""Which resource rows (the intent log) belong to a run's current attempt.

A multi-node attempt (a gang) has one row per node, its rank in the row's data (``rank``; none:
0, the head). The head is *the* machine of the attempt (its agent is the one whose status,
events and logs the run shows); the other nodes are its members (:func:`members`)."""

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


def rank_of(resource: ResourceRecord) -> int:
    """The node's rank in its attempt's gang (0: the head, or the attempt's only node)."""
    rank = resource.data.get("rank", 0)
    return rank if isinstance(rank, int) else 0


def members(ctx: Context, run: RunRecord) -> list[ResourceRecord]:
    """The open rows of the current attempt's other nodes than the head, by rank."""
    return sorted((r for r in open_resources(ctx, run) if rank_of(r) > 0), key=rank_of)


def active_resource(ctx: Context, run: RunRecord) -> ResourceRecord | None:
    """The launched machine of the current attempt (its head), while it is not being torn
    down."""
    for r in open_resources(ctx, run):
        if r.state == ResourceState.ACTIVE and rank_of(r) == 0:
            return r
    return None


def live_resource(ctx: Context, run: RunRecord) -> ResourceRecord | None:
    """The machine of the current attempt, launched and not confirmed gone (it may be
    terminating): the one whose agent may still answer (the head of a gang)."""
    for r in open_resources(ctx, run):
        if r.state in (ResourceState.ACTIVE, ResourceState.TERMINATING) and rank_of(r) == 0:
            return r
    return None
