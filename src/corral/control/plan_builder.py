"""Build the agent's plan for one attempt, once, from the run's resolved spec and the provider's
node contribution (:class:`~corral.providers.base.NodeProfile`). Nobody edits the plan after
this: providers serialise and deliver it, and what only the node knows at launch (its GPUs,
its state directory) goes to ``corral agent`` as launch arguments."""

from __future__ import annotations

import json
import posixpath

from corral import paths
from corral.control.interval import checkpoint_interval
from corral.control.node_paths import checkpoint_dir
from corral.providers.base import NodeProfile, Offer
from corral.spec import JobSpec
from corral.spec.nodes import node_count
from corral.wire.code import CodePlan
from corral.wire.container import ContainerPlan
from corral.wire.env import DEFAULT_GRACE_SECONDS, ENV_TRACKERS
from corral.wire.plan import (
    AcceptancePlan,
    AgentPlan,
    ArtifactsPlan,
    CheckpointPolicy,
    EvalPlan,
    ServicePlan,
    StagePlan,
)


def _capped(grace: float | None, cap: float | None) -> float | None:
    """A stage's own grace, within the node's cap (a cloud's preemption notice)."""
    return grace if grace is None or cap is None else min(grace, cap)


def longest_grace(spec: JobSpec) -> float:
    """The longest a graceful stop of this job may take on the agent (the run's grace or a
    stage's ``stop_grace``), for the controller's wait before teardown."""
    graces = [s.stop_grace for s in spec.stage_list() if s.stop_grace is not None]
    return max([DEFAULT_GRACE_SECONDS, *graces])


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
    code: CodePlan | None = None,
    interruptions_per_hour: float | None = None,
) -> AgentPlan:
    """The plan of attempt ``attempt`` of ``run_id`` on ``offer``. ``profile`` is what the
    offer's provider says its node needs (default: run on this machine); the controller's
    ``controller_timeout_s`` wins over the profile's default, the profile's grace cap over the
    requested ``grace_seconds``. On a node with a workdir of its own (``profile.workdir``) the
    workdir, checkpoints and agent state are the node's paths, and ``code`` says how the code
    gets there. ``interruptions_per_hour``: the rate the default checkpoint interval follows
    from (:mod:`corral.control.interval`; default: the profile's)."""
    node = profile or NodeProfile()
    workdir = str(spec.workdir)
    state_dir = str(paths.run_dir(run_id) / f"agent-a{attempt}")
    if node.workdir:
        workdir = node.workdir.rstrip("/") or "/"
        state_dir = posixpath.join(posixpath.dirname(workdir), f"agent-a{attempt}")
    cap = node.max_grace_seconds
    if cap is not None:
        grace_seconds = min(grace_seconds, cap)
    if controller_timeout_s is None:
        controller_timeout_s = node.controller_timeout_s
    stages = [
        StagePlan(
            name=s.name,
            run=s.run,
            gpus=s.gpus,
            needs=list(s.needs),
            env=dict(s.env),
            nodes=node_count(s.nodes, spec.resources.nodes),
            service=ServicePlan(**s.service.model_dump()) if s.service else None,
            progress=s.progress,
            stop_signal=s.stop_signal,
            stop_grace_seconds=_capped(s.stop_grace, cap),
            save_signal=s.save_signal,
            save_command=s.save_command,
            resume_args=s.resume_args,
        )
        for s in spec.stage_list()
    ]
    budget = spec.budget.max_cost_usd if spec.budget else None
    env = dict(spec.env)
    ck = spec.checkpoints
    rate = (
        interruptions_per_hour
        if interruptions_per_hour is not None
        else node.interruptions_per_hour
    )
    policy = CheckpointPolicy(
        keep_last=ck.keep_last,
        keep_best=ck.keep_best,
        metric=ck.metric,
        mode=ck.mode,
        interval_s=ck.interval or checkpoint_interval(rate, ck.max_lost_work),
        interruptions_per_hour=rate,
    )
    if spec.trackers:
        env.setdefault(ENV_TRACKERS, json.dumps([t.model_dump(mode="json") for t in spec.trackers]))
    return AgentPlan(
        run_id=run_id,
        attempt=attempt,
        workdir=workdir,
        env=env,
        setup=list(spec.setup),
        stages=stages,
        nodes=spec.resources.nodes,
        devices=None,
        checkpoint_dir=checkpoint_dir(spec, run_id, node),
        state_dir=state_dir,
        skip_stages=list(skip_stages or []),
        grace_seconds=grace_seconds,
        hourly_price=offer.price_per_hour,
        cost_offset_usd=cost_offset_usd,
        budget_usd=budget,
        run_name=spec.name,
        spec_hash=spec_hash,
        checkpoint_storage=spec.checkpoints.storage,
        checkpoint_policy=policy,
        checkpoint_paths=list(ck.path),
        checkpoint_settle_s=ck.settle,
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
        code=code if node.workdir else None,
        image=spec.image,
        container=_container(spec.image, node.container_engine),
    )


def _container(image: str | None, engine: str | None) -> ContainerPlan | None:
    """The job's commands run in ``image`` through the node's engine (see NodeProfile)."""
    if not image or not engine:
        return None
    return ContainerPlan(image=image, engine=None if engine == "auto" else engine)
