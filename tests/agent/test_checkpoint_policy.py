"""The checkpoint policy travels in the plan as one model (``AgentPlan.checkpoint_policy``):
the agent hands it to the job as the ``CORRAL_CHECKPOINT_*`` variables the SDK reads, and its
own mirrors apply the same retention; nothing parses those strings back."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.agent.mirror import Policy, policy_of
from corral.control.plan_builder import build_plan
from corral.providers.base import NodeProfile, Offer
from corral.spec import JobSpec
from corral.wire.plan import AgentPlan, CheckpointPolicy

from .helpers import make_plan

OFFER = Offer(
    provider="local",
    offer_id="o",
    region="here",
    gpu_type=None,
    gpu_count=0,
    cpus=1,
    memory_gb=1,
    spot=False,
    price_per_hour=0.0,
)


def test_the_plan_carries_the_specs_checkpoint_policy_as_one_model() -> None:
    spec = JobSpec.model_validate(
        {
            "name": "t",
            "workdir": "/tmp",
            "run": "true",
            "checkpoints": {
                "keep_last": 4,
                "keep_best": 2,
                "metric": "loss",
                "mode": "min",
                "interval": "10m",
            },
        }
    )
    plan = build_plan(spec, run_id="r-1", attempt=1, offer=OFFER, profile=NodeProfile())
    again = AgentPlan.model_validate_json(plan.model_dump_json())  # what the node reads
    assert again.checkpoint_policy == CheckpointPolicy(
        keep_last=4, keep_best=2, metric="loss", mode="min", interval_s=600
    )
    assert not any(k.startswith("CORRAL_CHECKPOINT") for k in again.env)
    # the mirrors' retention is built from the model, not from strings
    assert policy_of(again.checkpoint_policy) == Policy(4, 2, "loss", "min")


def test_a_policy_that_keeps_the_best_without_a_metric_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValidationError, match="keep_best > 0 needs a metric"):
        CheckpointPolicy(keep_best=1)
    with pytest.raises(ValidationError, match=r"checkpoint_policy\.mode"):
        AgentPlan.model_validate(
            make_plan(tmp_path, [{"name": "a", "run": "true"}]).model_dump()
            | {"checkpoint_policy": {"mode": "sideways"}}
        )


def test_the_job_sees_the_plans_policy_and_the_plan_env_cannot_override_it(
    tmp_path: Path, start_agent
) -> None:
    plan = make_plan(
        tmp_path,
        [{"name": "a", "run": "env | grep ^CORRAL_CHECKPOINT_ | sort > seen.txt"}],
        env={"CORRAL_CHECKPOINT_KEEP_LAST": "99"},
        checkpoint_policy={
            "keep_last": 5,
            "keep_best": 1,
            "metric": "acc",
            "mode": "max",
            "interval_s": 90,
        },
    )
    client = start_agent(plan)
    client.wait_finished()
    seen = (Path(plan.workdir) / "seen.txt").read_text().split()
    assert seen == [
        f"CORRAL_CHECKPOINT_DIR={plan.checkpoint_dir}",
        "CORRAL_CHECKPOINT_INTERVAL_S=90",
        "CORRAL_CHECKPOINT_KEEP_BEST=1",
        "CORRAL_CHECKPOINT_KEEP_LAST=5",
        "CORRAL_CHECKPOINT_METRIC=acc",
        "CORRAL_CHECKPOINT_MODE=max",
    ]
