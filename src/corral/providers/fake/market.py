"""Pure rules of the fake market: which offers fit a request, what is free, and when a spot
machine is preempted. No files, no processes, no clock: the provider passes the numbers in."""

from __future__ import annotations

import random
from collections.abc import Mapping

from corral.errors import InfeasibleRequest
from corral.providers.base import Offer, Requirements
from corral.providers.fake.cloud import CatalogEntry, FakeCloud

SPOT = "spot"
ON_DEMAND = "on-demand"


def offer_id(entry: CatalogEntry, spot: bool) -> str:
    return f"{entry.id}:{SPOT if spot else ON_DEMAND}"


def parse_offer_id(value: str) -> tuple[str, bool] | None:
    """``(entry id, spot)`` from an offer id of this market, or None if it is not one."""
    entry_id, sep, kind = value.rpartition(":")
    if not sep or kind not in (SPOT, ON_DEMAND):
        return None
    return entry_id, kind == SPOT


def _hardware_fits(entry: CatalogEntry, req: Requirements) -> bool:
    want_min, want_max = req.gpu_count_min, req.gpu_count_max
    if want_min > 0 or want_max > 0:
        if entry.gpu_count < want_min or (want_max > 0 and entry.gpu_count > want_max):
            return False
        if req.gpu_type and (entry.gpu_type or "").lower() != req.gpu_type.lower():
            return False
    if req.cpus is not None and entry.cpus < req.cpus:
        return False
    return req.memory_gb is None or entry.memory_gb >= req.memory_gb


def _kinds(entry: CatalogEntry, req: Requirements) -> list[tuple[bool, float]]:
    """(spot, price) of each way ``entry`` is sold that ``req`` accepts."""
    kinds = []
    if entry.spot_price is not None and req.spot is not False:
        kinds.append((True, entry.spot_price))
    if entry.on_demand_price is not None and req.spot is not True:
        kinds.append((False, entry.on_demand_price))
    return kinds


def _describe(cloud: FakeCloud) -> str:
    shapes = dict.fromkeys(
        f"{e.gpu_type} x{e.gpu_count}" if e.gpu_count else "no GPU" for e in cloud.offers
    )
    return ", ".join(shapes)


def _availability(free: int, capacity: int) -> str:
    if free <= 0:
        return "none"
    return "low" if free == 1 or free * 4 < capacity else "high"


def offers(
    cloud: FakeCloud, req: Requirements, in_use: Mapping[str, int], provider: str = "fake"
) -> list[Offer]:
    """Offers of ``cloud`` that satisfy ``req``, cheapest first, full ones included
    (``available=False``). ``in_use``: machines running per catalog entry id.

    Raises :class:`InfeasibleRequest` when no offer of the catalog could ever fit."""
    if req.providers is not None and provider not in req.providers:
        return []
    hardware = [e for e in cloud.offers if _hardware_fits(e, req)]
    if not hardware:
        raise InfeasibleRequest(
            f"the fake cloud has no machine that fits this job (it has {_describe(cloud)})"
        )
    out: list[Offer] = []
    for entry in hardware:
        if req.regions is not None and entry.region not in req.regions:
            continue
        for spot, price in _kinds(entry, req):
            if req.max_hourly_price is not None and price > req.max_hourly_price:
                continue
            free = max(0, entry.capacity - in_use.get(entry.id, 0))
            gpus = f"{entry.gpu_type} x{entry.gpu_count}" if entry.gpu_count else "CPU"
            details: dict[str, object] = {
                "machine": entry.machine or entry.id,
                "entry": entry.id,
                "capacity": entry.capacity,
                "free": free,
            }
            if free == 0:
                details["unavailable_reason"] = (
                    f"{provider}/{entry.region}: all {entry.capacity} {gpus} machines are in use"
                )
            elif free < req.nodes:
                details["unavailable_reason"] = (
                    f"{provider}/{entry.region}: {free} of {entry.capacity} {gpus} machines "
                    f"free, a gang of {req.nodes} asked"
                )
            out.append(
                Offer(
                    provider=provider,
                    offer_id=offer_id(entry, spot),
                    region=entry.region,
                    gpu_type=entry.gpu_type if entry.gpu_count else None,
                    gpu_count=entry.gpu_count,
                    cpus=entry.cpus,
                    memory_gb=entry.memory_gb,
                    spot=spot,
                    price_per_hour=price,
                    available=free >= req.nodes,
                    availability=_availability(free if free >= req.nodes else 0, entry.capacity),
                    catalog_date=cloud.catalog_date,
                    details=details,
                )
            )
    if not out:
        limits = []
        if req.spot is not None:
            limits.append("spot only" if req.spot else "on-demand only")
        if req.regions is not None:
            limits.append(f"regions {', '.join(req.regions)}")
        if req.max_hourly_price is not None:
            limits.append(f"at most ${req.max_hourly_price:g}/h")
        raise InfeasibleRequest(
            "the fake cloud has no offer within the job's limits (" + "; ".join(limits) + ")"
        )
    out.sort(key=lambda o: (not o.available, o.price_per_hour, o.region, o.offer_id))
    return out


def preemption_at(
    cloud: FakeCloud, *, key: str, index: int, launched_at: float, spot: bool
) -> tuple[float | None, str]:
    """When the market preempts an instance launched at ``launched_at`` (clock seconds), and
    why (``"schedule"`` or ``"random"``); ``(None, "")`` if never. On-demand machines are never
    preempted. The random draw is exponential with rate ``rate_per_hour * time_scale`` per hour,
    seeded by ``(seed, launch index)``: the same cloud gives the same trace every time."""
    if not spot:
        return None, ""
    times: list[tuple[float, str]] = []
    for p in cloud.preemptions:
        if (p.launch is not None and p.launch == index) or (p.key is not None and p.key == key):
            times.append((launched_at + p.after_s, "schedule"))
    if cloud.rate_per_hour > 0:
        rng = random.Random(f"corral-fake:{cloud.seed}:{index}")
        per_second = cloud.rate_per_hour * cloud.time_scale / 3600.0
        times.append((launched_at + rng.expovariate(per_second), "random"))
    if not times:
        return None, ""
    return min(times)
