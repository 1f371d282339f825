"""The typed values of the planner's questions: which offers fit a request
(:mod:`corral.service.offers`) and what a job would cost on each (:mod:`corral.service.estimate`).

Their ``to_json()`` is what ``corral offers --json`` and ``corral estimate --json`` print, key
for key and in the same order as before the service existed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from corral.providers.base import Offer
from corral.service.feasibility import LaunchVerdict
from corral.service.price_age import StalePrices
from corral.service.views import OmitsNone, View

#: Why one side (on-demand or spot) of an estimate row would not be taken as it is.
CostFlag = Literal[
    "over_max_hourly_price", "over_budget", "excluded_by_resources_spot", "unavailable"
]
OVER_MAX_PRICE: CostFlag = "over_max_hourly_price"
OVER_BUDGET: CostFlag = "over_budget"
SPOT_SETTING: CostFlag = "excluded_by_resources_spot"
UNAVAILABLE: CostFlag = "unavailable"

#: Where an estimate's hours come from: given (``--hours``), the spec's limit, or the longest
#: chain of the stages' own hours when neither is there.
HoursFrom = Literal["--hours", "limits.max_runtime", "stages"]
#: Where a stage's hours come from: its ``expected_runtime``, its time in earlier runs of the
#: same spec, or nowhere.
StageHoursFrom = Literal["spec", "earlier_runs", "unknown"]


class ProviderOffers(View):
    """What one provider asked gave: its offers (``available`` of them with capacity now)
    and, when it gave none that fit, why (``code``: ``not_loaded`` for a provider that could
    not be loaded, else the planner's code, e.g. ``infeasible``, ``no_fit``)."""

    provider: str
    offers: int
    available: int
    reason: str | None
    code: str | None


# --- offers ------------------------------------------------------------------------------------


class OfferQuery(View):
    """The request an offer list answers (``providers``: every provider asked)."""

    gpus: str | None
    spot: bool | None
    regions: list[str] | None
    providers: list[str]
    max_price: float | None
    nodes: int = 1


class PriceRefresh(View):
    """One provider's live price reload: done (prices as of when), or why not."""

    refreshed: bool
    prices_as_of: str | None
    reason: str


class OfferList(OmitsNone):
    """Offers for a request, cheapest first with unavailable ones last (at most the
    ``limit`` asked; ``count`` is how many fit in all), one row per provider asked, and the
    price reloads when asked for (``refresh``, left out of the JSON otherwise)."""

    omitted_when_none = frozenset({"refresh", "stale_prices"})

    query: OfferQuery
    offers: list[Offer]
    providers: list[ProviderOffers]
    refresh: dict[str, PriceRefresh] | None = None
    count: int
    #: providers whose price catalog is older than the limit (corral.service.price_age);
    #: None (left out of the JSON) when there is none
    stale_prices: list[StalePrices] | None = None


# --- estimates ---------------------------------------------------------------------------------


class CostSide(View):
    """One offer of an estimate row: its cost for the run's hours, and ``flags`` for what
    rules it out (``budget_stop_after_h``: when the budget would stop the run, if over it);
    ``chosen``: the offer a launch would take now."""

    offer_id: str
    price_per_hour: float
    cost_usd: float
    available: bool
    availability: str
    catalog_date: str | None
    flags: list[CostFlag]
    budget_stop_after_h: float | None
    chosen: bool


class EstimateRow(View):
    """One machine kind of a provider in a region: on-demand and spot side by side
    (``spot_saving``: the spot discount as a fraction, when both sides have a price)."""

    provider: str
    region: str
    machine: str
    gpu_type: str | None
    gpu_count: int
    on_demand: CostSide | None
    spot: CostSide | None
    spot_saving: float | None


class ChosenOffer(View):
    """The offer a launch would take now, and its cost for the run's hours."""

    provider: str
    region: str
    machine: str
    offer_id: str
    spot: bool
    price_per_hour: float
    cost_usd: float


class StageEstimate(View):
    """One stage of an estimate: its ``hours`` (None: unknown) and where they come from
    (``runs``: how many earlier runs of the same spec gave them), and their cost on the offer
    a launch would take (None when the hours or that offer are unknown)."""

    name: str
    needs: list[str]
    hours: float | None
    hours_from: StageHoursFrom
    runs: int
    cost_usd: float | None


class Estimate(OmitsNone):
    """What a job would cost on each offer that fits it (``corral estimate --json``):
    ``hours`` (from ``hours_from``: ``--hours`` or ``limits.max_runtime``), the spec's limits,
    the offer a launch would take (None: a launch would wait or be refused), what a launch
    would do now (``launch``, and ``refusal``: why it would be refused at once, exit 5), the
    rows, cheapest available first, and one row per provider asked; then each stage's part
    (:mod:`corral.service.stage_estimate`) and the stages' longest chain of ``needs`` in hours
    and on the offer a launch would take (``stages_hours``, ``stages_cost_usd``: None when a
    stage's hours, or that offer, are unknown)."""

    name: str
    hours: float
    hours_from: HoursFrom
    budget_usd: float | None
    max_hourly_price: float | None
    spot: bool | Literal["auto"]
    chosen: ChosenOffer | None
    launch: LaunchVerdict
    refusal: str | None
    omitted_when_none = frozenset({"stale_prices"})

    rows: list[EstimateRow]
    providers: list[ProviderOffers]
    #: providers whose price catalog is older than the limit (corral.service.price_age);
    #: None (left out of the JSON) when there is none
    stale_prices: list[StalePrices] | None = None
    stages: list[StageEstimate] = Field(default_factory=list)
    stages_hours: float | None = None
    stages_cost_usd: float | None = None
