"""Helpers shared by the RunPod tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from corral.providers.base import Bootstrap, Offer, Requirements
from corral.providers.runpod import RunPodProvider
from corral.wire.gang import GangRole
from corral.wire.plan import AgentPlan, StagePlan

from ..contract import trivial_plan

L40S = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1)
#: the gangs' first rendezvous port in the tests (RunPodSettings.gang_port)
PORT = 29617


def bootstrap(
    workdir: Path, key: str, run: str = "sleep 60", env: dict[str, str] | None = None, **plan_kw
) -> Bootstrap:
    workdir.mkdir(parents=True, exist_ok=True)
    plan = trivial_plan(workdir, key, run).model_copy(update=plan_kw)
    return Bootstrap(
        plan=plan.model_dump(mode="json"), token="tok-" + uuid.uuid4().hex, env=env or {}
    )


def offer(provider: RunPodProvider, *, spot: bool, req: Requirements = L40S) -> Offer:
    offers = provider.offers(req.model_copy(update={"spot": spot}))
    return next(o for o in offers if o.available)


def gang_bootstrap(
    workdir: Path, key: str, rank: int, *, nodes: int = 2, addr: str = "127.0.0.1", **kw
) -> Bootstrap:
    """Node ``rank``'s bootstrap as the controller builds it: one plan for every node, the
    node's place in the gang in ``gang`` and in its env."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = (
        'echo "rank=$CORRAL_NODE_RANK nodes=$CORRAL_NUM_NODES master=$CORRAL_MASTER_ADDR '
        'port=$CORRAL_MASTER_PORT"; sleep 60'
    )
    plan = AgentPlan(
        run_id=key.rsplit("-a", 1)[0],
        attempt=1,
        workdir=str(workdir),
        stages=[StagePlan(name="train", run=run, nodes=nodes)],
        checkpoint_dir=str(workdir / "checkpoints"),
        state_dir=str(workdir / "state" / key),
        grace_seconds=1.0,
        nodes=nodes,
    )
    role = GangRole(rank=rank, master_addr=addr, master_port=PORT)
    return Bootstrap(plan=plan, token="tok-same-for-the-attempt", env=role.env(), gang=role, **kw)
