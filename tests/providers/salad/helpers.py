"""Helpers shared by the SaladCloud tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from corral.providers.base import Bootstrap, Offer, Requirements
from corral.providers.salad import SaladProvider

from ..contract import provider_plan

RTX3090 = Requirements(gpu_type="RTX3090", gpu_count_min=1, gpu_count_max=1)


def offer(provider: SaladProvider, req: Requirements = RTX3090, priority: str = "batch") -> Offer:
    return next(o for o in provider.offers(req) if o.details.get("priority") == priority)


def bootstrap(
    provider: SaladProvider,
    the_offer: Offer,
    workdir: Path,
    key: str,
    run: str = "sleep 60",
    env: dict[str, str] | None = None,
    **spec,
) -> Bootstrap:
    """The bootstrap the controller would send: its plan with the provider's node part."""
    workdir.mkdir(parents=True, exist_ok=True)
    plan = provider_plan(provider, the_offer, workdir, key, run, **spec)
    return Bootstrap(plan=plan, token="tok-" + uuid.uuid4().hex, env=env or {})
