"""What a job would cost on each offer that fits it (``corral estimate``), on-demand and spot
side by side, before anything is launched.

Cost = price per hour x the run's hours (given, else ``limits.max_runtime``, else the longest
chain of the stages' own hours when every stage has one). Offers are
gathered for the job's hardware, regions and providers but regardless of ``resources.spot``
and ``max_hourly_price``, so both kinds show up; an offer those settings rule out, or whose
cost is over ``budget.max_cost_usd``, is flagged rather than hidden. The offer a launch would
take now (the cheapest available one within every limit) is marked. Under the rows, each
stage's hours and their cost on that offer (:mod:`corral.service.stage_estimate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from corral.control import planner
from corral.errors import BadInput
from corral.providers.base import Offer
from corral.service._store import using
from corral.service.feasibility import launch_plan, refusal, verdict
from corral.service.offers import asked_names, choose_providers, provider_rows
from corral.service.plan_views import (
    OVER_BUDGET,
    OVER_MAX_PRICE,
    SPOT_SETTING,
    UNAVAILABLE,
    ChosenOffer,
    CostFlag,
    CostSide,
    Estimate,
    EstimateRow,
    HoursFrom,
)
from corral.service.price_age import stale_prices
from corral.service.stage_estimate import earlier_stage_seconds, longest_chain, stage_estimates
from corral.spec import JobSpec, load_spec, spec_hash
from corral.store import Store


def machine_of(offer: Offer) -> str:
    """What pairs a spot offer with its on-demand twin: the provider's machine name
    (``details["machine"]``), else the hardware."""
    name = offer.details.get("machine") if offer.details else None
    if name:
        return str(name)
    mem = f"{offer.memory_gb:g}GB" if offer.memory_gb is not None else "?"
    cpus = f"{offer.cpus:g}cpu" if offer.cpus is not None else "?"
    return f"{offer.gpu_type or 'gpu'}x{offer.gpu_count}/{cpus}/{mem}"


@dataclass
class OfferPair:
    """One machine kind of a provider in a region: its on-demand and spot offers."""

    provider: str
    region: str
    machine: str
    on_demand: Offer | None = None
    spot: Offer | None = None


def pair_offers(offers: Iterable[Offer]) -> list[OfferPair]:
    """One pair per machine kind of a provider in a region, in the order of ``offers``; an
    offer whose side is already taken starts a pair of its own."""
    pairs: list[OfferPair] = []
    index: dict[tuple[str, str, str], list[OfferPair]] = {}
    for o in offers:
        key = (o.provider, o.region, machine_of(o))
        side = "spot" if o.spot else "on_demand"
        pair = next((p for p in index.get(key, []) if getattr(p, side) is None), None)
        if pair is None:
            pair = OfferPair(*key)
            pairs.append(pair)
            index.setdefault(key, []).append(pair)
        setattr(pair, side, o)
    return pairs


def hours_for(
    spec: JobSpec, hours: float | None, stages_hours: float | None = None
) -> tuple[float, HoursFrom]:
    """(hours, where they come from): ``hours`` (``--hours``; above 0, else BadInput), else
    ``limits.max_runtime``, else ``stages_hours`` (the stages' longest chain, when every
    stage's hours are known and above 0); BadInput when there is none of them."""
    if hours is not None:
        if not hours > 0:
            raise BadInput(f"--hours {hours:g}: expected a number of hours above 0")
        return float(hours), "--hours"
    if spec.limits.max_runtime:
        return spec.limits.max_runtime / 3600.0, "limits.max_runtime"
    if stages_hours:
        return stages_hours, "stages"
    raise BadInput(
        "the spec has no limits.max_runtime and its stages' times are not all known (no "
        "expected_runtime, no earlier run): give the expected run time with --hours"
    )


def _side(offer: Offer, hours: float, spec: JobSpec, chosen: Offer | None) -> CostSide:
    price = offer.price_per_hour
    cost = price * hours
    res, budget = spec.resources, spec.budget.max_cost_usd
    flags: list[CostFlag] = []
    if res.max_hourly_price is not None and price > res.max_hourly_price:
        flags.append(OVER_MAX_PRICE)
    if budget is not None and cost > budget:
        flags.append(OVER_BUDGET)
    if isinstance(res.spot, bool) and offer.spot != res.spot:
        flags.append(SPOT_SETTING)
    if not offer.available:
        flags.append(UNAVAILABLE)
    return CostSide(
        offer_id=offer.offer_id,
        price_per_hour=price,
        cost_usd=round(cost, 6),
        available=offer.available,
        availability=offer.availability,
        catalog_date=offer.catalog_date,
        flags=flags,
        budget_stop_after_h=round(budget / price, 3)
        if budget is not None and OVER_BUDGET in flags
        else None,
        chosen=offer is chosen,
    )


def _row(pair: OfferPair, hours: float, spec: JobSpec, chosen: Offer | None) -> EstimateRow:
    od, sp = pair.on_demand, pair.spot
    hardware = od or sp
    assert hardware is not None  # a pair is made for an offer
    saving = None
    if od and sp and od.price_per_hour > 0:
        saving = round(1 - sp.price_per_hour / od.price_per_hour, 4)
    return EstimateRow(
        provider=pair.provider,
        region=pair.region,
        machine=pair.machine,
        gpu_type=hardware.gpu_type,
        gpu_count=hardware.gpu_count,
        on_demand=_side(od, hours, spec, chosen) if od else None,
        spot=_side(sp, hours, spec, chosen) if sp else None,
        spot_saving=saving,
    )


def _row_order(row: EstimateRow) -> tuple[bool, float, str, str, str]:
    sides = [s for s in (row.on_demand, row.spot) if s is not None]
    available = [s for s in sides if s.available]
    cheapest = min(s.cost_usd for s in (available or sides))
    return (not available, cheapest, row.provider, row.region, row.machine)


def estimate_cost(
    file: str | Path,
    *,
    hours: float | None = None,
    overrides: Iterable[str] = (),
    today: date | None = None,
    store: Store | None = None,
) -> Estimate:
    """The cost of the job at ``file`` (with ``overrides`` such as
    ``resources.gpus=A100:2`` applied) on each offer of the enabled providers that fits its
    hardware, regions and providers, for ``hours`` (default: its ``limits.max_runtime``).
    Each stage's hours come from the spec or from earlier runs of the same spec in ``store``
    (default: the local one). Errors: the spec's (NotFound, BadInput), and BadInput for hours
    that are not above 0 or missing with no ``limits.max_runtime`` nor every stage's time."""
    spec = load_spec(file, list(overrides))
    with using(store) as st:
        earlier = earlier_stage_seconds(st, spec_hash(spec))
    stages = stage_estimates(spec, earlier, None)
    run_hours, source = hours_for(spec, hours, longest_chain(stages))
    req = planner.requirements_from_spec(spec)
    wide = req.model_copy(update={"spot": None, "max_hourly_price": None})
    loaded, skipped = choose_providers()
    result = planner.plan(loaded, wide)
    limits = planner.Limits(req)
    chosen = next((o for o in result.offers if o.available and limits.misfit(o) is None), None)
    # what a launch would do: the launch's own planner call, so the two never disagree
    launching = launch_plan(spec, providers=loaded, skipped=skipped)
    if chosen is not None and launching.cheapest is None:
        chosen = None
    rows = [_row(pair, run_hours, spec, chosen) for pair in pair_offers(result.offers)]
    rows.sort(key=_row_order)
    if chosen is not None:
        stages = stage_estimates(spec, earlier, chosen.price_per_hour)
    chain = longest_chain(stages)
    return Estimate(
        name=spec.name,
        hours=run_hours,
        hours_from=source,
        budget_usd=spec.budget.max_cost_usd,
        max_hourly_price=spec.resources.max_hourly_price,
        spot=spec.resources.spot,
        chosen=None
        if chosen is None
        else ChosenOffer(
            provider=chosen.provider,
            region=chosen.region,
            machine=machine_of(chosen),
            offer_id=chosen.offer_id,
            spot=chosen.spot,
            price_per_hour=chosen.price_per_hour,
            cost_usd=round(chosen.price_per_hour * run_hours, 6),
        ),
        launch=verdict(launching),
        refusal=refusal(launching, str(file)),
        rows=rows,
        providers=provider_rows(result, skipped, asked_names(loaded, skipped)),
        stale_prices=stale_prices(result.offers, today) or None,
        stages=stages,
        stages_hours=chain,
        stages_cost_usd=None
        if chain is None or chosen is None
        else round(chain * chosen.price_per_hour, 6),
    )
