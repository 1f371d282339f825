"""AWS offers: GPU instance types from the bundled dated catalog, on-demand at the live price
of the AWS Price List API (:mod:`.prices`; the catalog's price where it cannot be read), plus
live spot prices from ``describe_spot_price_history`` (one offer per availability zone, since
each zone is its own spot market and capacity pool).

Every offer says where its price came from and when: ``details["price_source"]`` (the API or
the catalog and its source) and ``details["price_at"]``, with ``catalog_date`` the same date or
time (a live price's is the time it was read).

Offer ids: ``<region>:<instance type>:on-demand`` and ``<zone>:<instance type>:spot``.
``details["machine"]`` names the capacity pool (``<zone or region>:<type>``), so the
``next-cheapest`` recovery strategy moves away from a pool that just reclaimed a machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from corral.errors import InfeasibleRequest, ProviderError
from corral.pricing import Catalog, CatalogEntry
from corral.providers.aws.client import Ec2
from corral.providers.aws.region_cache import RegionCache
from corral.providers.base import Offer, Requirements

SPOT = "spot"
ON_DEMAND = "on-demand"
#: Product descriptions of Linux spot prices (AWS answers the first; older accounts and moto
#: the second).
LINUX = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")

SpotTable = dict[str, dict[str, float]]  # instance type -> zone -> USD/h
OnDemandTable = dict[str, float]  # instance type -> USD/h
SPOT_SOURCE = "describe_spot_price_history"
LIVE_SOURCE = "AWS Price List API"


def offer_id(place: str, instance_type: str, spot: bool) -> str:
    return f"{place}:{instance_type}:{SPOT if spot else ON_DEMAND}"


def parse_offer_id(value: str) -> tuple[str, str, bool] | None:
    """(zone or region, instance type, spot) of an AWS offer id, or None."""
    parts = value.split(":")
    if len(parts) != 3 or parts[2] not in (SPOT, ON_DEMAND) or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1], parts[2] == SPOT


def hardware_fits(entry: CatalogEntry, req: Requirements) -> bool:
    """Whether ``entry`` meets ``req``; a share of a GPU (``gpu_fraction``) never does:
    corral schedules whole GPUs."""
    if entry.gpu_fraction is not None:
        return False
    lo, hi = req.gpu_count_min, req.gpu_count_max
    if lo > 0 or hi > 0:
        if entry.gpu_count < lo or (hi > 0 and entry.gpu_count > hi):
            return False
        if req.gpu_type and (entry.gpu_type or "").upper() != req.gpu_type.upper():
            return False
    if req.cpus is not None and entry.vcpus < req.cpus:
        return False
    return req.memory_gb is None or entry.memory_gb >= req.memory_gb


def _shapes(catalog: Catalog) -> str:
    whole = [e for e in catalog.entries if e.gpu_fraction is None]
    return ", ".join(dict.fromkeys(f"{e.gpu_type} x{e.gpu_count}" for e in whole))


def catalog_source(catalog: Catalog) -> str:
    """How an offer priced from ``catalog`` names its source."""
    return f"catalog {catalog.date}"


def _iso(ts: float | None) -> str:
    return datetime.fromtimestamp(ts or 0, UTC).isoformat(timespec="seconds")


def fetch_spot_prices(ec2: Ec2, region: str, types: list[str], now: datetime) -> SpotTable:
    """The current Linux spot price of each of ``types`` in each zone of ``region``."""
    newest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for row in ec2.pages(
        region,
        "describe_spot_price_history",
        "SpotPriceHistory",
        InstanceTypes=types,
        ProductDescriptions=[LINUX[0]],
        StartTime=now,
        EndTime=now,
    ):
        if row.get("ProductDescription") not in LINUX:
            continue
        try:
            price = float(row["SpotPrice"])
            key = (str(row["InstanceType"]), str(row["AvailabilityZone"]))
        except (KeyError, TypeError, ValueError):
            continue
        stamp = row.get("Timestamp") or datetime.min.replace(tzinfo=UTC)
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, price)
    table: SpotTable = {}
    for (itype, zone), (_, price) in newest.items():
        table.setdefault(itype, {})[zone] = price
    return table


class SpotPriceCache(RegionCache[SpotTable]):
    """Live spot prices per region, reused for ``ttl`` seconds of ``clock`` (a failure is not
    kept: the next caller asks EC2 again)."""

    def __init__(
        self,
        ec2: Ec2,
        types: list[str],
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ec2, self.types = ec2, list(types)
        super().__init__(
            lambda region, now: fetch_spot_prices(
                self.ec2, region, self.types, datetime.fromtimestamp(now, UTC)
            ),
            ttl,
            clock,
        )


def _offer(
    provider: str,
    catalog: Catalog,
    entry: CatalogEntry,
    region: str,
    req: Requirements,
    *,
    zone: str | None,
    price: float,
    fetched_at: float | None = None,
    on_demand_price: float | None = None,
) -> Offer:
    """One offer. ``fetched_at``: when a live price was read (None: the catalog's price)."""
    spot = zone is not None
    if spot:
        source, when = SPOT_SOURCE, _iso(fetched_at)
    elif fetched_at is not None:
        source, when = LIVE_SOURCE, _iso(fetched_at)
    else:
        source, when = catalog_source(catalog), catalog.date
    details: dict[str, Any] = {
        "instance_type": entry.instance_type,
        "machine": f"{zone or region}:{entry.instance_type}",
        "gpu_memory_gb": entry.gpu_memory_gb,
        "on_demand_price": on_demand_price
        if on_demand_price is not None
        else entry.prices.get(region),
        "disk_gb": req.disk_gb,
        "price_source": source,
        "price_at": when,
    }
    if source == catalog_source(catalog) and catalog.source:
        details["catalog_source"] = catalog.source  # the file and version it was built from
    if spot:
        details["zone"] = zone
        details["spot_price_at"] = when
    return Offer(
        provider=provider,
        offer_id=offer_id(zone or region, entry.instance_type, spot),
        region=region,
        gpu_type=entry.gpu_type,
        gpu_count=entry.gpu_count,
        cpus=entry.vcpus,
        memory_gb=entry.memory_gb,
        spot=spot,
        price_per_hour=round(price, 6),
        available=True,
        availability="unknown",
        catalog_date=when,
        details=details,
    )


def check_gpu_type(catalog: Catalog, req: Requirements) -> None:
    """:class:`InfeasibleRequest` naming a GPU type no instance type of the catalog has."""
    if not req.gpu_type or (req.gpu_count_min <= 0 and req.gpu_count_max <= 0):
        return
    known = sorted({e.gpu_type for e in catalog.entries if e.gpu_type and e.gpu_count})
    if req.gpu_type.upper() not in {k.upper() for k in known}:
        raise InfeasibleRequest(
            f"aws has no instance type with {req.gpu_type!r} GPUs (known: {', '.join(known)})"
        )


def build_offers(
    provider: str,
    catalog: Catalog,
    req: Requirements,
    regions: list[str],
    spot_prices: Callable[[str], tuple[SpotTable, float]],
    on_spot_error: Callable[[str, ProviderError], None] | None = None,
    on_demand_prices: Callable[[str], tuple[OnDemandTable, float]] | None = None,
    on_price_error: Callable[[str, ProviderError], None] | None = None,
) -> list[Offer]:
    """Offers of ``catalog`` in ``regions`` that fit ``req``, cheapest first.

    Raises :class:`InfeasibleRequest` if no instance type could ever fit. On-demand prices
    come from ``on_demand_prices(region)`` where it has the type (a failure is told to
    ``on_price_error`` and the catalog's prices are used), else from the catalog. Spot prices
    come from ``spot_prices(region)``; if that fails and the request accepts on-demand
    machines, the region's spot offers are left out (``on_spot_error`` is told), else the
    error is raised."""
    check_gpu_type(catalog, req)
    fitting = [e for e in catalog.entries if hardware_fits(e, req)]
    if not fitting:
        raise InfeasibleRequest(
            f"aws has no instance type that fits this job (catalog {catalog.date} has "
            f"{_shapes(catalog)})"
        )
    out: list[Offer] = []
    for region in regions:
        live: OnDemandTable = {}
        live_at: float | None = None
        if on_demand_prices is not None:
            try:
                live, live_at = on_demand_prices(region)
            except ProviderError as exc:
                if on_price_error is not None:
                    on_price_error(region, exc)
        here = [e for e in fitting if region in e.prices or e.instance_type in live]
        if not here:
            continue
        if req.spot is not True:
            for e in here:
                price = live.get(e.instance_type)
                out.append(
                    _offer(
                        provider,
                        catalog,
                        e,
                        region,
                        req,
                        zone=None,
                        price=price if price is not None else e.prices[region],
                        fetched_at=live_at if price is not None else None,
                        on_demand_price=price,
                    )
                )
        if req.spot is False:
            continue
        try:
            table, fetched = spot_prices(region)
        except ProviderError as exc:
            if req.spot is True:
                raise
            if on_spot_error is not None:
                on_spot_error(region, exc)
            continue
        for e in here:
            for zone, price in sorted(table.get(e.instance_type, {}).items()):
                out.append(
                    _offer(
                        provider,
                        catalog,
                        e,
                        region,
                        req,
                        zone=zone,
                        price=price,
                        fetched_at=fetched,
                        on_demand_price=live.get(e.instance_type),
                    )
                )
    if req.max_hourly_price is not None:
        out = [o for o in out if o.price_per_hour <= req.max_hourly_price]
    out.sort(key=lambda o: (o.price_per_hour, o.region, o.offer_id))
    return out
