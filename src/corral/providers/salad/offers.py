"""Offers from SaladCloud's GPU classes: one per GPU class and priority, priced per instance-hour.

``GET …/gpu-classes`` lists each class with its price at every priority (a string: parsed as
a decimal) and its vCPU/RAM/disk bounds. The price is USD per instance-hour and already holds
the instance's vCPUs and memory (SaladCloud's billing docs; the unit is UNCONFIRMED in the
API spec). ``high`` priority is not preempted by other workloads, so it is offered as
on-demand (``spot=False``); ``medium``, ``low`` and ``batch`` are spot. Any priority still
moves when its consumer node goes offline: every Salad run should checkpoint to object storage.

A CPU-only job gets one CPU offer (CPU groups always run at the lowest priority), priced from
the settings' per-vCPU and per-GB estimates (SaladCloud's API publishes no CPU prices).

Regions are country codes: the settings' ``country_codes`` or the job's two-letter
``regions``; ``any`` without either. ``is_high_demand`` classes are offered with low
availability; otherwise availability is unknown (a create can still find no node, and
SaladCloud then keeps allocating).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from corral.errors import InfeasibleRequest
from corral.providers.base import Offer, Requirements
from corral.providers.common.gpu_names import canonical_name, matches
from corral.providers.salad.settings import SaladSettings

ANY_REGION = "any"
_COUNTRY = re.compile(r"^[A-Za-z]{2}$")


def _price(value: Any) -> float | None:
    try:
        price = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    if not price.is_finite() or price < 0:
        return None
    return float(price)


def _bounded(wanted: float | None, default: float, low: Any, high: Any) -> int | None:
    """What one instance gets: ``wanted`` (None if above ``high``), else ``default`` (cut to
    ``high``), raised to ``low``."""
    num = (int, float)
    if wanted is not None:
        value = math.ceil(wanted)
        if isinstance(high, num) and value > high:
            return None
    else:
        value = math.ceil(default)
        if isinstance(high, num):
            value = min(value, int(high))
    if isinstance(low, num):
        value = max(value, math.ceil(low))
    return value


def countries(req: Requirements, settings: SaladSettings) -> list[str]:
    if req.regions:
        wanted = [r.lower() for r in req.regions if _COUNTRY.match(r) or r == ANY_REGION]
        if not wanted:
            raise InfeasibleRequest(
                "salad: regions are two-letter country codes (us, de, ...); none of "
                + ", ".join(req.regions)
                + " is one"
            )
        if ANY_REGION in wanted:
            return list(settings.country_codes)
        allowed = set(settings.country_codes)
        return [c for c in wanted if not allowed or c in allowed] or ["-"]
    return list(settings.country_codes)


def build_offers(
    classes: list[dict[str, Any]],
    req: Requirements,
    settings: SaladSettings,
    *,
    fetched_at: str | None,
    provider: str = "salad",
) -> list[Offer]:
    codes = countries(req, settings)
    if codes == ["-"]:
        return []
    region = ",".join(codes) if codes else ANY_REGION
    memory_gb = req.memory_gb
    if req.gpu_count_max == 0 and req.gpu_count_min == 0 and not req.gpu_type:
        if req.spot is False:  # CPU-only groups always run at the lowest priority
            return []
        return [_cpu_offer(req, settings, codes, region, provider)]
    offers: list[Offer] = []
    fitting_model = False
    for gpu in classes:
        count = int(gpu.get("gpu_count") or 1)
        name = str(gpu.get("name"))
        if not matches([name], req.gpu_type):
            continue
        fitting_model = True
        if count < req.gpu_count_min or (req.gpu_count_max and count > req.gpu_count_max):
            continue
        cpu = _bounded(req.cpus, settings.cpus, gpu.get("min_vcpu"), gpu.get("max_vcpu"))
        ram_mb = _bounded(
            memory_gb * 1024 if memory_gb else None,
            settings.memory_gb * 1024,
            gpu.get("min_ram"),
            gpu.get("max_ram"),
        )
        disk = _bounded(
            req.disk_gb * 1024**3 if req.disk_gb else None,
            settings.disk_gb * 1024**3,
            gpu.get("min_storage"),
            gpu.get("max_storage"),
        )
        if cpu is None or ram_mb is None or disk is None:
            continue  # the job wants more than this class gives one instance
        prices = {
            str(p.get("priority")): _price(p.get("price"))
            for p in gpu.get("prices") or []
            if isinstance(p, dict)
        }
        for priority in settings.priorities:
            price = prices.get(priority)
            spot = priority != "high"
            if price is None or (req.spot is not None and req.spot != spot):
                continue
            if req.max_hourly_price is not None and price > req.max_hourly_price:
                continue
            offers.append(
                Offer(
                    provider=provider,
                    offer_id=f"{gpu['id']}:{priority}",
                    region=region,
                    gpu_type=canonical_name(name),
                    gpu_count=count,
                    cpus=float(cpu),
                    memory_gb=round(ram_mb / 1024, 2),
                    spot=spot,
                    price_per_hour=price,
                    available=True,
                    availability="low" if gpu.get("is_high_demand") else "unknown",
                    catalog_date=fetched_at,
                    details={
                        "gpu_class_id": gpu["id"],
                        "gpu_class": name,
                        "gpu_class_type": gpu.get("gpu_class_type"),
                        "priority": priority,
                        "cpu": cpu,
                        "memory_mb": ram_mb,
                        "storage_bytes": disk,
                        "country_codes": codes,
                    },
                )
            )
    if req.gpu_type and not fitting_model and classes:
        known = sorted({canonical_name(str(c.get("name"))) for c in classes})
        raise InfeasibleRequest(
            f"salad: no GPU class is a {req.gpu_type} (SaladCloud has {', '.join(known)})"
        )
    return sorted(offers, key=lambda o: (o.price_per_hour, o.offer_id))


def _cpu_offer(
    req: Requirements, settings: SaladSettings, codes: list[str], region: str, provider: str
) -> Offer:
    cpu = math.ceil(req.cpus or settings.cpus)
    memory_gb = math.ceil(req.memory_gb or settings.memory_gb)
    disk = int((req.disk_gb or settings.disk_gb) * 1024**3)
    price = cpu * settings.cpu_price_per_vcpu_hour + memory_gb * settings.memory_price_per_gb_hour
    return Offer(
        provider=provider,
        offer_id=f"cpu-{cpu}x{memory_gb}gb:batch",
        region=region,
        gpu_type=None,
        gpu_count=0,
        cpus=float(cpu),
        memory_gb=float(memory_gb),
        spot=True,
        price_per_hour=round(price, 6),
        availability="unknown",
        details={
            "priority": "batch",
            "cpu": cpu,
            "memory_mb": memory_gb * 1024,
            "storage_bytes": disk,
            "country_codes": codes,
            "price_estimated": True,
        },
    )
