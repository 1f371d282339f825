"""Offers for a GPU request through the service: typed rows, limits, refresh, bad input."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from control.planner.helpers import use_fake_cloud
from corral.errors import BadInput
from corral.providers.base import Offer
from corral.service.offers import list_offers
from corral.service.plan_views import PriceRefresh, ProviderOffers

#: a day on which the test cloud's catalog (2025-05-01) is not stale yet
FRESH = date(2025, 5, 20)


@pytest.fixture(autouse=True)
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_fake_cloud(tmp_path, monkeypatch)


def test_offers_are_typed_cheapest_first_and_limited_with_the_count_of_all() -> None:
    found = list_offers(gpus="A100:1", spot=True, limit=2, today=FRESH)
    assert all(isinstance(o, Offer) for o in found.offers)
    assert [o.offer_id for o in found.offers] == ["a:spot", "b:spot"]
    assert found.count == 3  # the full A100 (no capacity) comes last, beyond the limit
    assert found.query.providers == ["local", "fake"] and found.query.spot is True
    rows = {r.provider: r for r in found.providers}
    assert rows["fake"] == ProviderOffers(
        provider="fake", offers=3, available=2, reason=None, code=None
    )
    assert rows["local"].code == "infeasible"
    doc = found.to_json()
    assert list(doc) == ["query", "offers", "providers", "count"]  # no refresh asked: no key
    assert doc["offers"][0] == found.offers[0].model_dump(mode="json")


def test_a_refresh_says_per_provider_whether_prices_were_reloaded() -> None:
    found = list_offers(providers=["FAKE"], refresh=True, today=FRESH)
    assert found.query.providers == ["fake"]
    assert found.refresh is not None and set(found.refresh) == {"fake"}
    assert isinstance(found.refresh["fake"], PriceRefresh)
    assert found.refresh["fake"].refreshed is False  # a catalog: nothing to reload
    assert list(found.to_json()) == ["query", "offers", "providers", "refresh", "count"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_price": 0.0}, r"--max-price 0: expected a price in USD per hour above 0"),
        ({"limit": -1}, r"--limit -1: expected 0 or more"),
        ({"gpus": "A100:x"}, r"--gpus: invalid GPU request"),
        ({"providers": ["nope"]}, r"unknown provider 'nope'"),
    ],
    ids=["price", "limit", "gpus", "provider"],
)
def test_bad_input_is_refused_naming_the_option(kwargs: dict, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        list_offers(**kwargs)
