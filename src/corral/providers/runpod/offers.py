"""Offers from RunPod's GPU types: one per GPU type, cloud (secure or community), kind
(on-demand or spot) and place, for the fewest GPUs the job takes, priced per hour for the
whole pod.

* **On-demand** prices and stock come from REST v2's GPU catalog (``GET /v2/catalog/gpus``
  with ``include=AVAILABILITY&product=POD``, one request per cloud for that many GPUs):
  ``price.secure``/``price.community`` per GPU, ``maxCount`` per cloud, ``availability``
  overall and per data center (``dataCenters``).
* **Spot** prices come from GraphQL ``gpuTypes`` (REST v2 sells no spot pods):
  ``lowestPrice.minimumBidPrice`` (the bid corral places) and its stock, or the flat
  ``secureSpotPrice``/``communitySpotPrice``. RunPod stopped documenting spot pods in 2026; when
  GraphQL gives no spot price (or fails), there are no spot offers: a job that takes either
  kind gets on-demand ones, and a job that asks for spot only gets a :class:`NoCapacity` that
  says why.

Stock maps to availability: HIGH -> high, MEDIUM and LOW -> low, NONE -> none (unavailable);
no stock data -> unknown. A listing is no capacity guarantee: a create can still fail with
NoCapacity, and the controller takes the next offer.

Regions are RunPod data centers (``EU-RO-1``). A pod goes wherever RunPod has capacity
(region ``any``) unless the job names data centers in ``regions`` or the pod mounts a network
volume: then each offer is pinned to one data center, with that data center's stock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from corral.errors import InfeasibleRequest, NoCapacity
from corral.providers.base import Offer, Requirements
from corral.providers.runpod.gpus import canonical_name, matches

ANY_REGION = "any"
_DATA_CENTER = re.compile(r"^[A-Z]{2}-[A-Z]{2,5}-\d+$")
_STOCK = {"HIGH": "high", "MEDIUM": "low", "LOW": "low", "NONE": "none"}
_FLAT_SPOT = {"SECURE": "secureSpotPrice", "COMMUNITY": "communitySpotPrice"}


@dataclass
class Prices:
    """What :func:`build_offers` reads: the v2 catalog per cloud, and GraphQL's spot prices
    (None when they could not be had, with ``spot_error`` saying why)."""

    catalog: dict[str, list[dict[str, Any]]]
    spot: list[dict[str, Any]] | None = None
    spot_error: str = ""
    fetched_at: str = ""
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for gpus in self.catalog.values():
            for g in gpus:
                self.by_id.setdefault(g["id"], g)


def gpu_count(req: Requirements) -> int:
    """GPUs per pod: the fewest the job takes (a RunPod pod has at least one)."""
    return max(1, req.gpu_count_min)


def regions(req: Requirements, volume_dc: str | list[str] | None) -> list[str]:
    """Data centers to offer: the volume's (or those of the volumes the job's volume could
    be), the job's RunPod data centers, or ``any``."""
    if volume_dc is not None and volume_dc != "":
        pinned = [volume_dc] if isinstance(volume_dc, str) else volume_dc
        return [dc for dc in pinned if not req.regions or dc in req.regions]
    if not req.regions:
        return [ANY_REGION]
    wanted = [r for r in req.regions if _DATA_CENTER.match(r) or r == ANY_REGION]
    if not wanted:
        raise InfeasibleRequest(
            f"runpod: none of the regions {', '.join(req.regions)} is a RunPod data center "
            "(e.g. EU-RO-1, US-TX-3)"
        )
    return wanted


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 and math.isfinite(value) else None


def _stock(word: Any) -> str:
    return _STOCK.get(str(word).upper(), "unknown") if word else "unknown"


def _name(gpu: dict[str, Any]) -> str:
    return str(gpu.get("name") or gpu.get("displayName") or "")


def _max_count(gpu: dict[str, Any], cloud: str | None = None) -> int:
    most = gpu.get("maxCount")
    if isinstance(most, dict):
        values = [most.get(cloud.lower())] if cloud else list(most.values())
        return max([int(v) for v in values if isinstance(v, int)] or [0])
    return int(gpu.get("maxGpuCount") or 0)


def check_feasible(prices: Prices, req: Requirements, count: int) -> None:
    """:class:`InfeasibleRequest` if no RunPod GPU type is the model, or none has enough GPUs."""
    types = list(prices.by_id.values())
    models = [t for t in types if matches(t["id"], _name(t), req.gpu_type)]
    if not models:
        known = sorted({canonical_name(t["id"]) for t in types})
        raise InfeasibleRequest(
            f"runpod has no {req.gpu_type} GPUs (it has {', '.join(known[:30])})",
            fields={"gpu_type": req.gpu_type},
        )
    most = max(_max_count(t) for t in models)
    if most and count > most:
        name = req.gpu_type or "GPU"
        raise InfeasibleRequest(
            f"runpod pods have at most {most} {name} GPUs; the job needs {count}",
            fields={"gpu_count": count, "max": most},
        )


def _on_demand_stock(gpu: dict[str, Any], region: str) -> str:
    if region == ANY_REGION:
        return _stock(gpu.get("availability"))
    centers = gpu.get("dataCenters")
    if not isinstance(centers, list):
        return "unknown" if "availability" not in gpu else "none"
    for dc in centers:
        if isinstance(dc, dict) and dc.get("id") == region:
            return _stock(dc.get("availability"))
    return "none"  # the catalog lists only the data centers that offer it


def data_centers(prices: Prices, gpu_id: str) -> list[str]:
    """The data centers where the catalog lists ``gpu_id`` in stock (in any cloud)."""
    out: list[str] = []
    for gpus in prices.catalog.values():
        for g in gpus:
            if g["id"] == gpu_id and isinstance(g.get("dataCenters"), list):
                out += [
                    str(d["id"]) for d in g["dataCenters"] if isinstance(d, dict) and d.get("id")
                ]
    return sorted(set(out))


def _spot_price(spot: dict[str, Any] | None, cloud: str) -> tuple[float | None, str]:
    if spot is None:
        return None, "unknown"
    lowest = spot.get(cloud.lower())
    if isinstance(lowest, dict):
        live = _number(lowest.get("minimumBidPrice"))
        stock = lowest.get("stockStatus")
        if live is not None:
            return live, _stock(stock) if stock else "none"
    return _number(spot.get(_FLAT_SPOT[cloud])), "unknown"


def build_offers(
    prices: Prices,
    req: Requirements,
    *,
    cloud_types: list[str],
    container_disk_gb: int,
    volume_dc: str | list[str] | None,
    new_volume: bool = False,
    provider: str = "runpod",
) -> list[Offer]:
    """The offers for ``req``. ``volume_dc``: where the pod must run (the data center(s) of
    the network volume it mounts); ``new_volume``: the pod mounts a network volume that does
    not exist yet, so each offer is pinned to one data center that has the GPU, where the
    launch creates it."""
    count = gpu_count(req)
    check_feasible(prices, req, count)
    places = regions(req, volume_dc)
    kinds = [k for k in (False, True) if req.spot is None or req.spot == k]
    extra: dict[str, Any] = {"disk_gb": max(container_disk_gb, math.ceil(req.disk_gb or 0))}
    if req.cpus:
        extra["min_vcpu_per_gpu"] = math.ceil(req.cpus / count)
    if req.memory_gb:
        extra["min_ram_per_gpu"] = math.ceil(req.memory_gb / count)
    if req.volumes:
        extra["volumes"] = [v.model_dump() for v in req.volumes]
    spot_by_id = {t["id"]: t for t in prices.spot or []}
    out: list[Offer] = []
    for gpu_id, gpu in prices.by_id.items():
        if not matches(gpu_id, _name(gpu), req.gpu_type):
            continue
        gpu_places = places
        if new_volume:
            gpu_places = regions(req, data_centers(prices, gpu_id))
        for cloud in cloud_types:
            listed = {g["id"]: g for g in prices.catalog.get(cloud, [])}.get(gpu_id, gpu)
            if listed.get(cloud.lower()) is False:
                continue  # not sold in this cloud
            most = _max_count(listed, cloud)
            if most and count > most:
                continue
            for spot in kinds:
                if spot:
                    per_gpu, spot_stock = _spot_price(spot_by_id.get(gpu_id), cloud)
                else:
                    per_gpu = _number((listed.get("price") or {}).get(cloud.lower()))
                    spot_stock = ""
                if per_gpu is None:
                    continue  # not sold this way
                price = round(per_gpu * count, 6)
                if req.max_hourly_price is not None and price > req.max_hourly_price:
                    continue
                for region in gpu_places:
                    availability = spot_stock if spot else _on_demand_stock(listed, region)
                    details: dict[str, Any] = {
                        "gpu_type_id": gpu_id,
                        "gpu_name": _name(gpu) or gpu_id,
                        "gpu_memory_gb": gpu.get("memory") or gpu.get("memoryInGb"),
                        "cloud_type": cloud,
                        "price_per_gpu": per_gpu,
                        **extra,
                    }
                    if spot:
                        details["bid_per_gpu"] = per_gpu
                    if region != ANY_REGION:
                        details["data_center_id"] = region
                    if availability == "none":
                        where = "" if region == ANY_REGION else f" in {region}"
                        details["unavailable_reason"] = (
                            f"runpod: no {gpu_id} x{count} in stock in the {cloud.lower()} "
                            f"cloud{where}"
                        )
                    kind = "spot" if spot else "on-demand"
                    out.append(
                        Offer(
                            provider=provider,
                            offer_id=f"{cloud}:{gpu_id}:{count}:{kind}@{region}",
                            region=region,
                            gpu_type=canonical_name(gpu_id),
                            gpu_count=count,
                            spot=spot,
                            price_per_hour=price,
                            available=availability != "none",
                            availability=availability,
                            catalog_date=prices.fetched_at,
                            details=details,
                        )
                    )
    if req.spot is True and not out and prices.spot is None and (places or new_volume):
        raise NoCapacity(
            f"runpod: no spot pods are sold now ({prices.spot_error or 'no spot prices'}); "
            "allow on-demand with `resources.spot: auto`"
        )
    out.sort(key=lambda o: (not o.available, o.price_per_hour, o.offer_id))
    return out
