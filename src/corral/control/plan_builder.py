"""Build the agent's plan for one attempt, once, from the run's resolved spec and the provider's
node contribution (:class:`~corral.providers.base.NodeProfile`). Nobody edits the plan after
this: providers serialise and deliver it, and what only the node knows at launch (its GPUs,
its state directory) goes to ``corral agent`` as launch arguments."""

from __future__ import annotations

import json
from pathlib import Path

from corral import paths
from corral.providers.base import NodeProfile, Offer
from corral.spec import JobSpec
from corral.wire.env import (
    DEFAULT_GRACE_SECONDS,
    ENV_CKPT_KEEP_BEST,
    ENV_CKPT_KEEP_LAST,
    ENV_CKPT_METRIC,
    ENV_CKPT_MODE,
    ENV_TRACKERS,
)
from corral.wire.plan import AcceptancePlan, AgentPlan, ArtifactsPlan, EvalPlan, StagePlan


def checkpoint_dir(spec: JobSpec, run_id: str, profile: NodeProfile | None = None) -> str:
    """The checkpoint directory on the node: the node's own (``profile.checkpoint_dir``: a
    persistent volume, say), else ``checkpoints.dir`` (relative to the workdir), else one per
    run under CORRAL_HOME (stable across attempts)."""
    if profile is not None and profile.checkpoint_dir:
        return profile.checkpoint_dir
    chosen = spec.checkpoints.dir if spec.checkpoints else None
    if chosen:
        p = Path(chosen)
        return str(p if p.is_absolute() else Path(spec.workdir) / p)
    return str(paths.run_dir(run_id) / "checkpoints")


def build_plan(
    spec: JobSpec,
    *,
    run_id: str,
    attempt: int,
    offer: Offer,
    skip_stages: list[str] | None = None,
    cost_offset_usd: float = 0.0,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    spec_hash: str = "",
    controller_timeout_s: float | None = None,
    profile: NodeProfile | None = None,
) -> AgentPlan:
    """The plan of attempt ``attempt`` of ``run_id`` on ``offer``. ``profile`` is what the
    offer's provider says its node needs (default: run on this machine); the controller's
    ``controller_timeout_s`` wins over the profile's default, the profile's grace cap over the
    requested ``grace_seconds``."""
    node = profile or NodeProfile()
    if node.max_grace_seconds is not None:
        grace_seconds = min(grace_seconds, node.max_grace_seconds)
    if controller_timeout_s is None:
        controller_timeout_s = node.controller_timeout_s
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
        checkpoint_dir=checkpoint_dir(spec, run_id, node),
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
        host=node.host,
        port=node.port,
        shutdown_command=node.shutdown_command,
        node_hooks=list(node.node_hooks),
    )
