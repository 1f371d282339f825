"""Live on-demand prices from the AWS Price List API (``pricing.get_products``, served only
from us-east-1 whatever region is priced), cached per region with the time they were read.

One query per region: the EC2 products of the ``GPU instance`` family there, Linux, shared
tenancy, no pre-installed software, capacity status ``Used``, no license (every page). Each
product's on-demand term gives the USD price per hour. The bundled catalog is the fallback:
a region whose query fails (no ``pricing:GetProducts`` right, say) or names none of corral's
instance types keeps the catalog's prices, and the offers say so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from corral.providers.aws.client import Ec2
from corral.providers.aws.region_cache import RegionCache

#: the region of the Price List API's endpoint (it prices every region)
PRICING_REGION = "us-east-1"
#: a failed query is asked again after this long at most
RETRY_FAILED_S = 300.0
SOURCE = "AWS Price List API"

PriceTable = dict[str, float]  # instance type -> USD/h


def product_filters(region: str | None = None, instance_type: str | None = None) -> list[dict]:
    """The ``get_products`` filters of on-demand Linux prices (of one region's GPU instances,
    or of one instance type)."""
    wanted = {
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    if region is not None:
        wanted = {"regionCode": region, "instanceFamily": "GPU instance", **wanted}
    if instance_type is not None:
        wanted = {"instanceType": instance_type, **wanted}
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in wanted.items()]


def on_demand_price(item: dict[str, Any]) -> float | None:
    """The USD per hour of a Price List product's on-demand term (None without one)."""
    for term in ((item.get("terms") or {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            if str(dim.get("unit", "")).lower() in ("hrs", "hours", "hour"):
                try:
                    price = float(dim["pricePerUnit"]["USD"])
                except (KeyError, TypeError, ValueError):
                    continue
                if price > 0:
                    return price
    return None


def parse_products(page_items: list[Any]) -> list[dict[str, Any]]:
    """The products of a ``PriceList`` (each a JSON string on the wire); unreadable ones are
    left out."""
    out = []
    for raw in page_items:
        try:
            item = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def fetch_on_demand_prices(ec2: Ec2, region: str, types: list[str]) -> PriceTable:
    """The on-demand Linux price of each of ``types`` sold in ``region`` (those the Price List
    has). Raises :class:`ProviderError` if the API fails."""
    wanted = set(types)
    table: PriceTable = {}
    for raw in ec2.pages(
        PRICING_REGION,
        "get_products",
        "PriceList",
        service="pricing",
        ServiceCode="AmazonEC2",
        Filters=product_filters(region),
        FormatVersion="aws_v1",
    ):
        for item in parse_products([raw]):
            attrs = (item.get("product") or {}).get("attributes") or {}
            itype = attrs.get("instanceType")
            if itype not in wanted or attrs.get("regionCode", region) != region:
                continue
            price = on_demand_price(item)
            if price is not None:
                table[str(itype)] = round(price, 6)
    return table


class OnDemandPriceCache(RegionCache[PriceTable]):
    """Live on-demand prices per region, reused for ``ttl`` seconds of ``clock``; a failure is
    remembered for :data:`RETRY_FAILED_S` (or ``ttl``, if shorter) so that every ``offers``
    call does not ask again."""

    def __init__(
        self,
        ec2: Ec2,
        types: list[str],
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ec2, self.types = ec2, list(types)
        super().__init__(
            lambda region, _now: fetch_on_demand_prices(self.ec2, region, self.types),
            ttl,
            clock,
            retry_failed_s=RETRY_FAILED_S,
        )
