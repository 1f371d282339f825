"""Helpers shared by the RunPod tests."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from corral.providers.base import Bootstrap, Instance, InstanceState, Offer, Requirements
from corral.providers.runpod import RunPodProvider

from ..contract import trivial_plan

L40S = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1)


def new_key() -> str:
    return f"r{uuid.uuid4().hex[:10]}-a1"


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


def wait_until(cond, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_state(provider: RunPodProvider, inst: Instance, state: InstanceState):
    return wait_until(lambda: (st := provider.status(inst)).state == state and st, what=str(state))
