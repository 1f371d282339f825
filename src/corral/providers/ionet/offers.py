"""Offers from IO.net's hardware: one per hardware type and location with replicas, for the
fewest GPUs per container the job takes (1-8; IO.net runs one node per container), priced from
``GET /price``.

``/hardware/max-gpus-per-container`` lists the hardware (``hardware_id``, name, the most GPUs
one container may have); ``/available-replicas`` gives, per location, how many such
containers could start now; ``/price`` estimates the total for ``duration_hours`` (corral
divides by the hours: USD per hour of the container). Availability: 3 replicas or more is
high, 1-2 low, 0 none (``available=False``). Regions are a location's ISO code (``DE``) or its
id; the settings' ``location_ids`` restrict them. IO.net has no CPU-only containers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.errors import InfeasibleRequest
from corral.providers.base import Offer, Requirements
from corral.providers.common.gpu_names import canonical_name, matches
from corral.providers.ionet.settings import IonetSettings


def gpus_wanted(req: Requirements) -> int:
    return max(1, req.gpu_count_min)


def _wanted_location(loc: dict[str, Any], req: Requirements, settings: IonetSettings) -> bool:
    if settings.location_ids and loc.get("id") not in settings.location_ids:
        return False
    if not req.regions:
        return True
    names = {str(loc.get("id")), str(loc.get("iso2") or "").upper(), "ANY"}
    return any(r.upper() in names for r in req.regions)


def build_offers(
    hardware: list[dict[str, Any]],
    locations: Callable[[int, int], list[dict[str, Any]]],
    price: Callable[[int, int, int], float | None],
    req: Requirements,
    settings: IonetSettings,
    *,
    fetched_at: str | None,
    provider: str = "ionet",
) -> list[Offer]:
    """``locations(hardware_id, gpus)`` and ``price(hardware_id, location_id, gpus)`` are the
    (cached) API calls."""
    if req.gpu_count_max == 0 and req.gpu_count_min == 0 and not req.gpu_type:
        return []  # IO.net containers have at least one GPU
    if req.spot is True:
        return []  # IO.net sells no interruptible tier
    count = gpus_wanted(req)
    named = [h for h in hardware if matches([str(h.get("hardware_name") or "")], req.gpu_type)]
    if req.gpu_type and hardware and not named:
        known = sorted({canonical_name(str(h.get("hardware_name"))) for h in hardware})
        raise InfeasibleRequest(
            f"ionet: no hardware is a {req.gpu_type} (IO.net has {', '.join(known)})"
        )
    fitting = [h for h in named if int(h.get("max_gpus_per_container") or 8) >= count]
    if named and not fitting:
        most = max(int(h.get("max_gpus_per_container") or 8) for h in named)
        raise InfeasibleRequest(f"ionet: at most {most} GPUs per container, not {count}")
    offers: list[Offer] = []
    for hw in fitting:
        hid = int(hw["hardware_id"])
        locs = [loc for loc in locations(hid, count) if _wanted_location(loc, req, settings)]
        locs.sort(key=lambda loc: -int(loc.get("available_replicas") or 0))
        for loc in locs[: settings.max_locations]:
            replicas = int(loc.get("available_replicas") or 0)
            per_hour = price(hid, int(loc["id"]), count) if replicas > 0 else None
            if replicas > 0 and per_hour is None:
                continue
            if req.max_hourly_price is not None and (per_hour or 0) > req.max_hourly_price:
                continue
            name = str(hw.get("hardware_name") or "GPU")
            offers.append(
                Offer(
                    provider=provider,
                    offer_id=f"{hid}:{count}:{loc['id']}",
                    region=str(loc.get("iso2") or loc["id"]).upper(),
                    gpu_type=canonical_name(name),
                    gpu_count=count,
                    spot=False,
                    price_per_hour=round(per_hour or 0.0, 6),
                    available=replicas > 0,
                    availability="high" if replicas >= 3 else "low" if replicas else "none",
                    catalog_date=fetched_at,
                    details={
                        "hardware_id": hid,
                        "hardware_name": name,
                        "location_id": int(loc["id"]),
                        "location": loc.get("name"),
                        "available_replicas": replicas,
                        **({} if replicas else {"unavailable_reason": "no replicas free"}),
                    },
                )
            )
    return sorted(offers, key=lambda o: (not o.available, o.price_per_hour, o.offer_id))
