"""Offers from RunPod's GPU types: one per GPU type, cloud (secure or community) and kind
(on-demand or spot), for the fewest GPUs the job takes, priced per hour for the whole pod.

Prices come from GraphQL ``gpuTypes``: ``lowestPrice(gpuCount, secureCloud)`` gives the
on-demand price (``uninterruptablePrice``), the spot floor (``minimumBidPrice``, the bid
corral places) and the stock for that many GPUs; the flat ``securePrice``/``secureSpotPrice``
fields stand in when it is missing. Stock maps to availability: High -> high, Medium and Low
-> low, None -> none (unavailable); no stock data -> unknown. A listing is no capacity
guarantee: a create can still fail with NoCapacity, and the controller takes the next offer.

Regions are RunPod data centers (``EU-RO-1``). Without a network volume a pod goes wherever
RunPod has capacity (region ``any``) unless the job names data centers in ``regions``; with a
network volume every pod runs in the volume's data center.
"""

from __future__ import annotations

import math
import re
from typing import Any

from corral.errors import InfeasibleRequest
from corral.providers.base import Offer, Requirements
from corral.providers.runpod.gpus import canonical_name, matches

ANY_REGION = "any"
_DATA_CENTER = re.compile(r"^[A-Z]{2}-[A-Z]{2,5}-\d+$")
_STOCK = {"HIGH": "high", "MEDIUM": "low", "LOW": "low", "NONE": "none"}
_FLAT_PRICE = {
    ("SECURE", False): "securePrice",
    ("SECURE", True): "secureSpotPrice",
    ("COMMUNITY", False): "communityPrice",
    ("COMMUNITY", True): "communitySpotPrice",
}


def gpu_count(req: Requirements) -> int:
    """GPUs per pod: the fewest the job takes (a RunPod pod has at least one)."""
    return max(1, req.gpu_count_min)


def regions(req: Requirements, volume_dc: str | None) -> list[str]:
    """Data centers to offer: the volume's, the job's RunPod data centers, or ``any``."""
    if volume_dc:
        return [volume_dc] if not req.regions or volume_dc in req.regions else []
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


def _availability(lowest: Any) -> str:
    if not isinstance(lowest, dict):
        return "unknown"
    stock = lowest.get("stockStatus")
    return _STOCK.get(str(stock).upper(), "unknown") if stock else "none"


def _per_gpu(gpu: dict[str, Any], cloud: str, spot: bool) -> float | None:
    lowest = gpu.get(cloud.lower())
    if isinstance(lowest, dict):
        live = _number(lowest.get("minimumBidPrice" if spot else "uninterruptablePrice"))
        if live is not None:
            return live
    return _number(gpu.get(_FLAT_PRICE[(cloud, spot)]))


def check_feasible(types: list[dict[str, Any]], req: Requirements, count: int) -> None:
    """:class:`InfeasibleRequest` if no RunPod GPU type is the model, or none has enough GPUs."""
    models = [t for t in types if matches(t["id"], str(t.get("displayName") or ""), req.gpu_type)]
    if not models:
        known = sorted({canonical_name(t["id"]) for t in types})
        raise InfeasibleRequest(
            f"runpod has no {req.gpu_type} GPUs (it has {', '.join(known[:30])})",
            fields={"gpu_type": req.gpu_type},
        )
    most = max(int(t.get("maxGpuCount") or 0) for t in models)
    if most and count > most:
        name = req.gpu_type or "GPU"
        raise InfeasibleRequest(
            f"runpod pods have at most {most} {name} GPUs; the job needs {count}",
            fields={"gpu_count": count, "max": most},
        )


def build_offers(
    types: list[dict[str, Any]],
    req: Requirements,
    *,
    cloud_types: list[str],
    container_disk_gb: int,
    volume_dc: str | None,
    fetched_at: str,
    provider: str = "runpod",
) -> list[Offer]:
    count = gpu_count(req)
    check_feasible(types, req, count)
    places = regions(req, volume_dc)
    kinds = [k for k in (False, True) if req.spot is None or req.spot == k]
    extra: dict[str, Any] = {"disk_gb": max(container_disk_gb, math.ceil(req.disk_gb or 0))}
    if req.cpus:
        extra["min_vcpu_per_gpu"] = math.ceil(req.cpus / count)
    if req.memory_gb:
        extra["min_ram_per_gpu"] = math.ceil(req.memory_gb / count)
    out: list[Offer] = []
    for gpu in types:
        if not matches(gpu["id"], str(gpu.get("displayName") or ""), req.gpu_type):
            continue
        most = int(gpu.get("maxGpuCount") or 0)
        if most and count > most:
            continue
        for cloud in cloud_types:
            if gpu.get("secureCloud" if cloud == "SECURE" else "communityCloud") is False:
                continue
            availability = _availability(gpu.get(cloud.lower()))
            for spot in kinds:
                per_gpu = _per_gpu(gpu, cloud, spot)
                if per_gpu is None:
                    continue  # not sold this way
                price = round(per_gpu * count, 6)
                if req.max_hourly_price is not None and price > req.max_hourly_price:
                    continue
                for region in places:
                    details: dict[str, Any] = {
                        "gpu_type_id": gpu["id"],
                        "gpu_name": gpu.get("displayName") or gpu["id"],
                        "gpu_memory_gb": gpu.get("memoryInGb"),
                        "cloud_type": cloud,
                        "price_per_gpu": per_gpu,
                        **extra,
                    }
                    if spot:
                        details["bid_per_gpu"] = per_gpu
                    if region != ANY_REGION:
                        details["data_center_id"] = region
                    if availability == "none":
                        details["unavailable_reason"] = (
                            f"runpod: no {gpu['id']} x{count} in stock in the {cloud.lower()} cloud"
                        )
                    kind = "spot" if spot else "on-demand"
                    out.append(
                        Offer(
                            provider=provider,
                            offer_id=f"{cloud}:{gpu['id']}:{count}:{kind}@{region}",
                            region=region,
                            gpu_type=canonical_name(gpu["id"]),
                            gpu_count=count,
                            spot=spot,
                            price_per_hour=price,
                            available=availability != "none",
                            availability=availability,
                            catalog_date=fetched_at,
                            details=details,
                        )
                    )
    out.sort(key=lambda o: (not o.available, o.price_per_hour, o.offer_id))
    return out
