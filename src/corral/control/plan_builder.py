"""Build the agent's plan for one attempt from the run's resolved spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral import paths
from corral.providers.base import Offer
from corral.wire.env import (
    DEFAULT_GRACE_SECONDS,
    ENV_CKPT_KEEP_BEST,
    ENV_CKPT_KEEP_LAST,
    ENV_CKPT_METRIC,
    ENV_CKPT_MODE,
    ENV_TRACKERS,
)
from corral.wire.plan import AcceptancePlan, AgentPlan, ArtifactsPlan, EvalPlan, StagePlan


def checkpoint_dir(spec: Any, run_id: str) -> str:
    """The checkpoint directory on the node: ``checkpoints.dir`` (relative to the workdir) or,
    when the spec leaves it open, one per run under CORRAL_HOME (stable across attempts)."""
    chosen = spec.checkpoints.dir if spec.checkpoints else None
    if chosen:
        p = Path(chosen)
        return str(p if p.is_absolute() else Path(spec.workdir) / p)
    return str(paths.run_dir(run_id) / "checkpoints")


def build_plan(
    spec: Any,
    *,
    run_id: str,
    attempt: int,
    offer: Offer,
    skip_stages: list[str] | None = None,
    cost_offset_usd: float = 0.0,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    spec_hash: str = "",
    controller_timeout_s: float | None = None,
) -> AgentPlan:
    stages = [
        StagePlan(name=s.name, run=s.run, gpus=s.gpus, needs=list(s.needs), env=dict(s.env))
        for s in spec.stage_list()
    ]
    budget = spec.budget.max_cost_usd if spec.budget else None
    env = dict(spec.env)
    ck = spec.checkpoints
    env.setdefault(ENV_CKPT_KEEP_LAST, str(ck.keep_last))
    env.setdefault(ENV_CKPT_KEEP_BEST, str(ck.keep_best))
    env.setdefault(ENV_CKPT_MODE, ck.mode)
    if ck.metric:
        env.setdefault(ENV_CKPT_METRIC, ck.metric)
    if spec.trackers:
        env.setdefault(ENV_TRACKERS, json.dumps([t.model_dump(mode="json") for t in spec.trackers]))
    return AgentPlan(
        run_id=run_id,
        attempt=attempt,
        workdir=str(spec.workdir),
        env=env,
        setup=list(spec.setup),
        stages=stages,
        devices=None,
        checkpoint_dir=checkpoint_dir(spec, run_id),
        state_dir=str(paths.run_dir(run_id) / f"agent-a{attempt}"),
        skip_stages=list(skip_stages or []),
        grace_seconds=grace_seconds,
        hourly_price=offer.price_per_hour,
        cost_offset_usd=cost_offset_usd,
        budget_usd=budget,
        run_name=spec.name,
        spec_hash=spec_hash,
        checkpoint_storage=spec.checkpoints.storage,
        artifacts=ArtifactsPlan(paths=list(spec.artifacts.paths), storage=spec.artifacts.storage),
        eval=EvalPlan(
            report=spec.eval.report,
            acceptance=[
                AcceptancePlan(metric=a.metric, op=a.op, value=a.value)
                for a in spec.eval.acceptance
            ],
            fail_run_on_reject=spec.eval.fail_run_on_reject,
        ),
        controller_timeout_s=controller_timeout_s,
    )
