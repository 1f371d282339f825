"""A gang's history, node by node: for each rank, the attempts it took part in, on which
machine, and how each ended for it (the manifest's ``node_attempts``, docs/multinode.md).

Read from the controller's books: the run's resource rows (one per node and attempt; a node
kept through a repair has a row in each attempt, with the same machine) and its attempts (how
each ended; the nodes the provider said were lost, kept with the attempt by
``control.repair``). Sent to every node of the gang with ``POST /gang/start``; the head
writes it into the manifest at the attempt's end, its own attempt's nodes ended as its phase.
"""

from __future__ import annotations

from corral.control.context import Context
from corral.control.resources import instance_of, rank_of
from corral.store.records import AttemptRecord, RunRecord
from corral.wire.gang import NodeAttempt

#: the attempt's data key of the nodes it lost, as the provider said (rank: ``preempted`` or
#: ``lost``), written by ``control.repair`` when the attempt's recovery begins
LOST = "lost_nodes"


def history(ctx: Context, run: RunRecord) -> list[NodeAttempt]:
    """Every node of every attempt of ``run`` that had a machine, by rank and attempt; the
    current attempt's nodes have not ended (``ended`` None)."""
    attempts = {a.number: a for a in ctx.store.attempts(run.id)}
    machines = {}
    for row in ctx.store.resources(run_id=run.id):  # in creation order: a later try wins
        inst = instance_of(row)
        if inst is not None and row.attempt in attempts:
            machines[row.attempt, rank_of(row)] = inst
    out = []
    for (number, rank), inst in sorted(machines.items(), key=lambda item: item[0][::-1]):
        after = machines.get((number + 1, rank))
        if number >= run.attempt:
            ended = None
        elif after is not None and after.instance_id == inst.instance_id:
            ended = "kept"
        else:
            ended = _ended(attempts[number], rank)
        zone = inst.data.get("zone")
        out.append(
            NodeAttempt(
                rank=rank,
                attempt=number,
                provider=inst.provider,
                instance_id=inst.instance_id,
                region=str(inst.data.get("region") or inst.offer.region or "") or None,
                zone=zone if isinstance(zone, str) and zone else None,
                ended=ended,
            )
        )
    return out


def _ended(attempt: AttemptRecord, rank: int) -> str:
    """How ``attempt`` ended for node ``rank``, whose machine did not go on into the next."""
    lost = (attempt.data or {}).get(LOST) or {}
    if str(rank) in lost:
        return str(lost[str(rank)])
    if attempt.exit_reason == "gang_incomplete":
        return "gang_incomplete"
    if lost:  # the gang lost another node and was relaunched whole
        return "released"
    return attempt.exit_reason or attempt.state or "ended"
