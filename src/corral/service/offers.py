"""What the providers would rent out for a GPU request (``corral offers``), and the pieces the
cost estimate shares: which providers to ask, and one row per provider asked.

Error messages name the CLI's options (``--gpus``, ``--max-price``, ``--limit``): they are
what users of ``corral offers`` have always read, and a server's parameters bear the same
names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date

from corral.control import planner
from corral.control.providers import load_providers
from corral.errors import BadInput, CorralError
from corral.providers.base import Provider, Requirements
from corral.providers.registry import provider_class
from corral.service.plan_views import OfferList, OfferQuery, PriceRefresh, ProviderOffers
from corral.service.price_age import stale_prices
from corral.spec import parse_gpu_request


def parse_gpus(text: str | None) -> tuple[str | None, int, int]:
    """(type, min, max) of a GPU request such as ``A100:1``; None: any machine (0 GPUs and
    up). BadInput for a request that does not parse."""
    if text is None:
        return None, 0, 0
    try:
        parsed = parse_gpu_request(text)
    except ValueError as exc:
        raise BadInput(f"--gpus: {exc}") from None
    return parsed["type"], parsed["min"], parsed["max"]


def choose_providers(names: Sequence[str] = ()) -> tuple[dict[str, Provider], dict[str, str]]:
    """The providers ``names`` names (any case; an unknown name is BadInput), else the
    enabled ones (``CORRAL_PROVIDERS``); and why each of those that could not be loaded
    (missing credentials, say) was left out."""
    wanted = list(dict.fromkeys(n.strip().lower() for n in names if n.strip()))
    for name in wanted:
        try:
            provider_class(name)
        except BadInput:
            raise
        except CorralError:
            pass  # known but not loadable: load_providers gives its reason
    return load_providers(wanted or None)


def asked_names(loaded: Mapping[str, Provider], skipped: Mapping[str, str]) -> list[str]:
    """Every provider asked, in the order they were named: loaded ones, then left-out ones."""
    return list(loaded) + [n for n in skipped if n not in loaded]


def provider_rows(
    result: planner.Plan, skipped: Mapping[str, str], names: Sequence[str]
) -> list[ProviderOffers]:
    """One row per provider in ``names``: how many of ``result``'s offers it gave and, if
    none, why; those with offers first, then by name."""
    total = Counter(o.provider for o in result.offers)
    free = Counter(o.provider for o in result.offers if o.available)
    rows = []
    for name in names:
        reason: str | None
        code: str | None
        if name in skipped:
            reason, code = skipped[name], "not_loaded"
        else:
            reason, code = result.rejected.get(name), result.codes.get(name)
        rows.append(
            ProviderOffers(
                provider=name,
                offers=total[name],
                available=free[name],
                reason=reason,
                code=code,
            )
        )
    rows.sort(key=lambda r: (r.reason is not None, r.provider))
    return rows


def list_offers(
    *,
    gpus: str | None = None,
    spot: bool | None = None,
    regions: Sequence[str] | None = None,
    providers: Sequence[str] | None = None,
    max_price: float | None = None,
    refresh: bool = False,
    limit: int | None = None,
    today: date | None = None,
    nodes: int = 1,
) -> OfferList:
    """The offers of ``providers`` (default: the enabled ones) for machines with ``gpus``
    (e.g. ``"A100:1"``, ``"L40S:2..4"``; None: any machine), spot or on-demand (None: both),
    in ``regions`` (None: all) at ``max_price`` USD per hour or less, ``nodes`` of them for one
    job (a provider that cannot give a gang that big is a row with its reason): cheapest first,
    unavailable ones last, at most ``limit`` of them. ``refresh`` reloads live prices first
    where a provider publishes them. One provider's failure is its row's reason, never an
    error; bad input (a request that does not parse, a price or limit out of range, an
    unknown provider) is BadInput. ``stale_prices``: providers whose price catalog is over
    60 days old on ``today`` (default: the service's clock)."""
    if nodes < 1:
        raise BadInput(f"--nodes {nodes}: expected 1 or more machines")
    if limit is not None and limit < 0:
        raise BadInput(f"--limit {limit}: expected 0 or more")
    if max_price is not None and not max_price > 0:
        raise BadInput(f"--max-price {max_price:g}: expected a price in USD per hour above 0")
    gpu_type, low, high = parse_gpus(gpus)
    loaded, skipped = choose_providers(providers or ())
    names = asked_names(loaded, skipped)
    refreshed = planner.refresh_prices(loaded) if refresh else None
    req = Requirements(
        gpu_type=gpu_type,
        gpu_count_min=low,
        gpu_count_max=high,
        spot=spot,
        max_hourly_price=max_price,
        regions=list(regions) if regions else None,
        nodes=nodes,
    )
    result = planner.plan(loaded, req)
    return OfferList(
        query=OfferQuery(
            gpus=gpus,
            spot=spot,
            regions=req.regions,
            providers=names,
            max_price=max_price,
            nodes=nodes,
        ),
        offers=result.offers if limit is None else result.offers[:limit],
        providers=provider_rows(result, skipped, names),
        refresh=None
        if refreshed is None
        else {name: PriceRefresh(**r) for name, r in refreshed.items()},
        count=len(result.offers),
        stale_prices=stale_prices(result.offers, today) or None,
    )
