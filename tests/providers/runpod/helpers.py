"""Helpers shared by the RunPod tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from corral.providers.base import Bootstrap, Offer, Requirements
from corral.providers.runpod import RunPodProvider

from ..contract import trivial_plan

L40S = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1)


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
