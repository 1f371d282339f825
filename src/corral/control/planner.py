"""The planner: offers from every enabled provider, filtered by the job's requirements and
sorted cheapest first (available offers before unavailable ones)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.errors import CorralError, InfeasibleRequest, ProviderError
from corral.providers.base import Offer, Provider, Requirements


def requirements_from_spec(spec: Any) -> Requirements:
    """Turn ``spec.resources`` into provider-neutral :class:`Requirements`."""
    res = spec.resources
    gpus = res.gpus
    spot = res.spot
    return Requirements(
        gpu_type=getattr(gpus, "type", None) if gpus else None,
        gpu_count_min=gpus.min if gpus else 0,
        gpu_count_max=gpus.max if gpus else 0,
        cpus=res.cpus,
        memory_gb=res.memory,
        disk_gb=res.disk,
        spot=None if spot in (None, "auto") else bool(spot),
        max_hourly_price=res.max_hourly_price,
        providers=list(res.providers) if res.providers else None,
        regions=list(res.regions) if res.regions else None,
    )


@dataclass
class Plan:
    offers: list[Offer] = field(default_factory=list)
    #: provider name -> why it cannot serve this job (infeasible, error, excluded)
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def available(self) -> list[Offer]:
        return [o for o in self.offers if o.available]

    def explain(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in sorted(self.rejected.items()))


def _fits(offer: Offer, req: Requirements) -> bool:
    if req.max_hourly_price is not None and offer.price_per_hour > req.max_hourly_price:
        return False
    if req.regions and offer.region not in req.regions:
        return False
    if req.spot is not None and offer.spot != req.spot:
        return False
    if offer.gpu_count < req.gpu_count_min:
        return False
    return not (req.gpu_type and offer.gpu_type and offer.gpu_type.upper() != req.gpu_type.upper())


def sort_key(offer: Offer) -> tuple:
    return (not offer.available, offer.price_per_hour, offer.provider, offer.region, offer.offer_id)


def plan(providers: dict[str, Provider], req: Requirements) -> Plan:
    """Collect, filter and sort offers. Never raises for one provider's failure."""
    result = Plan()
    for name, provider in providers.items():
        if req.providers is not None and name not in req.providers:
            result.rejected[name] = "not in resources.providers"
            continue
        try:
            offers = provider.offers(req)
        except InfeasibleRequest as e:
            result.rejected[name] = e.message
            continue
        except ProviderError as e:
            result.rejected[name] = f"unavailable ({e.message})"
            continue
        except CorralError as e:
            result.rejected[name] = e.message
            continue
        kept = [o for o in offers if _fits(o, req)]
        if offers and not kept:
            result.rejected[name] = "no offer within the price, region and spot limits"
        result.offers.extend(kept)
    result.offers.sort(key=sort_key)
    return result
