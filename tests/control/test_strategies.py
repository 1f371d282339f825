"""Recovery strategies order the offers for the next attempt of a recovering run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from corral.control.strategies import STRATEGIES, get_strategy
from corral.errors import BadInput
from corral.providers.base import Offer
from corral.spec import RECOVERY_STRATEGIES


def offer(region: str, price: float, offer_id: str = "g5", provider: str = "cloud") -> Offer:
    return Offer(
        provider=provider,
        offer_id=offer_id,
        region=region,
        price_per_hour=price,
        spot=True,
        gpu_count=1,
        gpu_type="A10G",
    )


OFFERS = [offer("us-east", 1.0), offer("eu-west", 1.2), offer("us-west", 1.5, "g6")]


def attempt(o: Offer) -> SimpleNamespace:
    return SimpleNamespace(offer=o.model_dump(mode="json"), instance_id="i-1")


def test_same_offer_comes_back_where_the_last_attempt_ran() -> None:
    ordered = get_strategy("same-offer").order(OFFERS, [attempt(OFFERS[1])])
    assert [o.region for o in ordered] == ["eu-west", "us-east", "us-west"]


def test_next_cheapest_avoids_the_preempted_region() -> None:
    ordered = get_strategy("next-cheapest").order(OFFERS, [attempt(OFFERS[0])])
    assert [o.region for o in ordered] == ["eu-west", "us-west", "us-east"]


def test_without_history_both_keep_the_cheapest_first_order() -> None:
    for name in STRATEGIES:
        assert get_strategy(name).order(OFFERS, []) == OFFERS


def test_attempts_that_never_got_a_machine_are_ignored() -> None:
    never = SimpleNamespace(offer=OFFERS[0].model_dump(mode="json"), instance_id=None)
    assert get_strategy("next-cheapest").order(OFFERS, [never]) == OFFERS


def test_the_spec_and_the_registry_know_the_same_strategies() -> None:
    assert set(RECOVERY_STRATEGIES) == set(STRATEGIES)


def test_unknown_strategy_is_bad_input() -> None:
    with pytest.raises(BadInput, match="same-offer"):
        get_strategy("fastest")


def test_next_cheapest_avoids_the_preempted_machine_where_the_provider_names_it() -> None:
    a = offer("pool", 1.0, "rtx4090")
    a.details["machine"] = "node-7"
    b = offer("pool", 1.1, "rtx4090")
    b.details["machine"] = "node-9"
    # same region for both (a pool); the machine that was preempted goes last
    ordered = get_strategy("next-cheapest").order([a, b], [attempt(a)])
    assert [o.details["machine"] for o in ordered] == ["node-9", "node-7"]
