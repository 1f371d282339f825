"""``checkpoints.path`` / ``checkpoints.settle`` and ``resume_args``: parsed, checked with one
line naming the field, and carried into the agent's plan."""

from __future__ import annotations

from corral.control.plan_builder import build_plan
from corral.providers.base import Offer

from .helpers import load, one

OFFER = Offer(provider="local", offer_id="x", price_per_hour=0.0)


def test_path_is_a_string_or_a_list_and_reaches_the_plan() -> None:
    spec = load(
        "name: t\nrun: python train.py\nresume_args: --init_from=resume\n"
        "checkpoints: {path: out/ckpt.pt, settle: 30s, storage: /tmp/s}\n"
    )
    assert spec.checkpoints.path == ["out/ckpt.pt"] and spec.checkpoints.settle == 30.0
    plan = build_plan(spec, run_id="r1", attempt=1, offer=OFFER)
    assert plan.checkpoint_paths == ["out/ckpt.pt"] and plan.checkpoint_settle_s == 30.0
    assert plan.stages[0].resume_args == "--init_from=resume"

    spec = load(
        "name: t\nstages:\n- {name: a, run: x, resume_args: '--resume $CORRAL_RESUME_FROM'}\n"
        "checkpoints: {path: ['out/checkpoint-*', 'runs/*/weights/last.pt']}\n"
    )
    assert spec.checkpoints.path == ["out/checkpoint-*", "runs/*/weights/last.pt"]
    assert spec.checkpoints.settle == 10.0
    plan = build_plan(spec, run_id="r1", attempt=1, offer=OFFER)
    assert plan.stages[0].resume_args == "--resume $CORRAL_RESUME_FROM"
    # a plan without them reads as before
    assert (
        "resume_args"
        not in build_plan(
            load("name: t\nrun: x\n"), run_id="r", attempt=1, offer=OFFER
        ).model_dump()["stages"][0]
    )


def test_bad_paths_and_resume_args_name_the_field() -> None:
    err = one("name: t\nrun: x\ncheckpoints: {path: /abs/ckpt.pt}\n")
    assert "checkpoints.path" in err["field"] and "relative" in err["message"]
    err = one("name: t\nrun: x\ncheckpoints: {path: ../up.pt}\n")
    assert "outside the workdir" in err["message"]
    err = one("name: t\nrun: x\ncheckpoints: {path: .}\n")
    assert "checkpoints.path" in err["field"] and "whole workdir" in err["message"]
    err = one("name: t\nrun: x\ncheckpoints: {settle: soon}\n")
    assert "checkpoints.settle" in err["field"]
    err = one("name: t\nstages: [{name: a, run: x}]\nresume_args: --resume\n")
    assert "resume_args" in err["field"] and "each stage" in err["message"]
