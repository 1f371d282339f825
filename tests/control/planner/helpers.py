"""In-memory providers and offers for planner tests (and for tests of the CLI through the
registry: ``register`` adds one under a name for the length of a test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from corral.errors import NotFound
from corral.providers.base import (
    Bootstrap,
    Instance,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
    SupportsPriceRefresh,
)


def offer(provider: str = "p", price: float = 1.0, **kw: Any) -> Offer:
    fields: dict[str, Any] = dict(
        provider=provider,
        offer_id=f"{kw.get('region', 'r1')}-{price}-{'spot' if kw.get('spot') else 'od'}",
        region="r1",
        gpu_type="A100",
        gpu_count=1,
        price_per_hour=price,
    )
    fields.update(kw)
    return Offer(**fields)


class ListProvider(Provider):
    """Sells a fixed list of offers; launches nothing. ``error`` is raised by ``offers``."""

    name: ClassVar[str] = "list"

    def __init__(self, offers: list[Offer] | None = None, error: BaseException | None = None):
        self._offers = list(offers or [])
        self.error = error
        self.asked: list[Requirements] = []

    def offers(self, req: Requirements) -> list[Offer]:
        self.asked.append(req)
        if self.error is not None:
            raise self.error
        return list(self._offers)

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        raise NotFound("this test provider launches nothing")

    def status(self, instance: Instance) -> InstanceStatus:
        raise NotFound("this test provider launches nothing")

    def terminate(self, instance: Instance) -> None:
        return None

    def find(self, key: str) -> Instance | None:
        return None


class LivePriceProvider(ListProvider, SupportsPriceRefresh):
    """Spot prices from a "live API" it caches: ``refresh_prices`` loads the next price."""

    name: ClassVar[str] = "live"
    #: what the live API answers on each refresh (shared: the CLI builds its own instance)
    feed: ClassVar[list[float]] = []

    def __init__(self) -> None:
        super().__init__()
        self.price = 3.0

    def offers(self, req: Requirements) -> list[Offer]:
        return [
            offer("live", self.price, spot=True, catalog_date="2025-06-01", region="live-1"),
            offer("live", 9.0, catalog_date="2025-06-01", region="live-1"),
        ]

    def refresh_prices(self) -> str | None:
        if not self.feed:
            from corral.errors import RateLimited

            raise RateLimited("live: too many requests (retry in 30 s)")
        self.price = self.feed.pop(0)
        return "2025-06-02T10:00:00Z"


class BrokenProvider(ListProvider):
    """Its offers call fails with a bug whose text must not be shown."""

    name: ClassVar[str] = "broken"

    def offers(self, req: Requirements) -> list[Offer]:
        raise KeyError("https://api.example.invalid/graphql?api_key=sk-SECRET-123")


def register(monkeypatch: pytest.MonkeyPatch, name: str, cls: type) -> None:
    """Make ``cls`` the provider registered under ``name`` for this test."""
    from corral.providers import registry

    monkeypatch.setitem(registry._PROVIDERS, name, f"{cls.__module__}:{cls.__qualname__}")


#: A100 x1 in two regions, one full A100 kind (cheapest, no capacity), an L40S and an 8-GPU box
CLOUD = """
catalog_date: "2025-05-01"
offers:
  - {id: a, region: us-east, gpu_type: A100, gpu_count: 1, spot_price: 0.5, on_demand_price: 2.0}
  - {id: b, region: eu-west, gpu_type: A100, gpu_count: 1, spot_price: 0.6, on_demand_price: 1.8}
  - {id: full, region: us-east, gpu_type: A100, gpu_count: 1, spot_price: 0.1,
     on_demand_price: 0.3, capacity: 0}
  - {id: l40s, region: us-east, gpu_type: L40S, gpu_count: 1, spot_price: 0.3, on_demand_price: 1.0}
  - {id: big, region: us-east, gpu_type: A100, gpu_count: 8, spot_price: 4.0, on_demand_price: 16.0}
"""


def use_fake_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``CORRAL_PROVIDERS=local,fake``: the fake cloud of :data:`CLOUD`, and a local machine
    with one L40S (so an A100 request is infeasible here whatever GPUs the test machine has).
    Returns the catalog's path."""
    path = tmp_path / "cloud.yaml"
    path.write_text(CLOUD)
    monkeypatch.setenv("CORRAL_FAKE_CLOUD", str(path))
    monkeypatch.setenv("CORRAL_PROVIDERS", "local,fake")
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")
    return path
