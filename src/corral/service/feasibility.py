"""Whether a launch can go ahead: the one planner call ``corral launch`` makes, shared with
``corral estimate`` and ``corral preflight`` so that all three judge a spec alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from corral.control import planner
from corral.control.providers import load_providers
from corral.providers.base import Provider
from corral.spec import JobSpec

#: what a launch would do now (:func:`verdict`)
LaunchVerdict = Literal["now", "wait", "refused"]


def launch_plan(
    spec: JobSpec,
    *,
    providers: Mapping[str, Provider] | None = None,
    skipped: Mapping[str, str] | None = None,
) -> planner.Plan:
    """The planner's offers for ``spec`` as a launch asks for them: the enabled providers
    (``CORRAL_PROVIDERS``) unless ``providers`` is given, each one left out (``skipped``:
    why it could not be loaded) among the plan's ``rejected``."""
    if providers is None:
        providers, skipped = load_providers()
    result = planner.plan(providers, planner.requirements_from_spec(spec))
    for name, why in (skipped or {}).items():
        result.rejected.setdefault(name, why)
    return result


def verdict(result: planner.Plan) -> LaunchVerdict:
    """What a launch planned as ``result`` does now: start on an available offer, wait for
    capacity (offers fit, none is free), or be refused at once (no enabled provider has an
    offer that fits)."""
    if not result.offers:
        return "refused"
    return "now" if result.cheapest is not None else "wait"


def refusal(result: planner.Plan, source: str) -> str | None:
    """Why a launch of ``source`` planned as ``result`` is refused (None: it is not): the
    message of the InfeasibleRequest ``corral launch`` exits 5 with."""
    if result.offers:
        return None
    return f"no provider can run {source}: {result.explain() or 'none enabled'}"
