"""The planner: filters, order, allow-list, regions, spot, failures, parallel asking."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace

import pytest

from corral.control import planner
from corral.errors import AuthFailed, InfeasibleRequest
from corral.providers.base import Requirements
from corral.spec import load_spec_text

from .helpers import BrokenProvider, ListProvider, LivePriceProvider, offer


def req(**kw) -> Requirements:
    return Requirements(**{"gpu_type": "A100", "gpu_count_min": 1, "gpu_count_max": 1, **kw})


def ids(result: planner.Plan) -> list[str]:
    return [f"{o.provider}:{o.offer_id}" for o in result.offers]


def test_offers_are_sorted_cheapest_first_with_unavailable_ones_last() -> None:
    a = ListProvider([offer("a", 3.0), offer("a", 0.5, available=False, region="r2")])
    b = ListProvider([offer("b", 1.0), offer("b", 2.0, region="r2")])
    result = planner.plan({"a": a, "b": b}, req())
    prices = [(o.available, o.price_per_hour) for o in result.offers]
    assert prices == [(True, 1.0), (True, 2.0), (True, 3.0), (False, 0.5)]
    assert result.cheapest is not None and result.cheapest.price_per_hour == 1.0
    assert [o.price_per_hour for o in result.available] == [1.0, 2.0, 3.0]
    assert result.rejected == {}


def test_equal_prices_are_ordered_by_provider_region_and_offer_id() -> None:
    p = ListProvider([offer("z", 1.0, region="b"), offer("z", 1.0, region="a")])
    q = ListProvider([offer("y", 1.0, region="c")])
    result = planner.plan({"z": p, "y": q}, req())
    assert [(o.provider, o.region) for o in result.offers] == [("y", "c"), ("z", "a"), ("z", "b")]


def test_the_fast_sort_gives_the_same_order_as_sort_key() -> None:
    rng = random.Random(5)
    offers = [
        offer(
            rng.choice("pqr"),
            rng.choice([0.5, 1.0, 1.5, 2.0]),
            region=rng.choice(["r1", "r2"]),
            offer_id=f"o{i}",
            available=rng.random() < 0.7,
        )
        for i in range(400)
    ]
    assert planner.sort_offers(offers) == sorted(offers, key=planner.sort_key)


def test_max_hourly_price_drops_dearer_offers_and_says_why() -> None:
    p = ListProvider([offer("p", 1.0), offer("p", 2.5, region="r2")])
    dear = ListProvider([offer("dear", 4.0), offer("dear", 5.0)])
    result = planner.plan({"p": p, "dear": dear}, req(max_hourly_price=2.0))
    assert [o.price_per_hour for o in result.offers] == [1.0]
    assert result.codes["dear"] == "no_fit"
    assert result.rejected["dear"] == "none of its 2 offers fits: 2 over $2/h"


def test_regions_keep_only_offers_in_those_regions() -> None:
    p = ListProvider([offer("p", 1.0, region="us"), offer("p", 2.0, region="eu")])
    p2 = ListProvider([offer("q", 0.5, region="ap"), offer("q", 3.0, region="eu")])
    result = planner.plan({"p": p, "q": p2}, req(regions=["eu"]))
    assert [(o.provider, o.region) for o in result.offers] == [("p", "eu"), ("q", "eu")]


def test_the_allow_list_excludes_other_providers_without_asking_them() -> None:
    allowed = ListProvider([offer("allowed", 2.0)])
    other = ListProvider([offer("other", 1.0)])
    result = planner.plan({"allowed": allowed, "other": other}, req(providers=["allowed"]))
    assert ids(result) == ["allowed:r1-2.0-od"]
    assert other.asked == []
    assert result.rejected["other"] == "not in resources.providers"
    assert result.codes["other"] == "excluded"


@pytest.mark.parametrize(
    ("spot", "expected"),
    [(None, [True, False]), (True, [True]), (False, [False])],
    ids=["auto-either-cheapest-first", "spot-only", "on-demand-only"],
)
def test_spot_setting_picks_the_kind_of_offer(spot: bool | None, expected: list[bool]) -> None:
    p = ListProvider([offer("p", 3.0, spot=False), offer("p", 1.0, spot=True)])
    result = planner.plan({"p": p}, req(spot=spot))
    assert [o.spot for o in result.offers] == expected


def test_spot_auto_in_the_spec_means_either_kind() -> None:
    def resources(spot: str) -> Requirements:
        spec = load_spec_text(f"name: x\nrun: echo\nresources: {{gpus: 'A100:1..2', spot: {spot}}}")
        return planner.requirements_from_spec(spec)

    assert resources("auto").spot is None
    assert resources("true").spot is True
    assert resources("false").spot is False
    r = resources("auto")
    assert (r.gpu_type, r.gpu_count_min, r.gpu_count_max) == ("A100", 1, 2)


def test_gpu_count_type_cpus_and_memory_are_checked_even_if_a_provider_does_not() -> None:
    p = ListProvider(
        [
            offer("p", 1.0, gpu_count=8, offer_id="eight"),
            offer("p", 1.1, gpu_type="L40S", offer_id="l40s"),
            offer("p", 1.2, cpus=4, offer_id="few-cpus"),
            offer("p", 1.3, memory_gb=16, offer_id="little-memory"),
            offer("p", 1.4, gpu_type="a100", cpus=32, memory_gb=128, offer_id="ok"),
        ]
    )
    result = planner.plan({"p": p}, req(cpus=8, memory_gb=64))
    assert ids(result) == ["p:ok"]
    limits = planner.Limits(req(cpus=8, memory_gb=64))
    assert [limits.misfit(o) for o in p._offers] == [
        "gpu_count",
        "gpu_type",
        "cpus",
        "memory",
        None,
    ]


def test_a_cpu_job_accepts_any_machine() -> None:
    p = ListProvider([offer("p", 1.0, gpu_count=0, gpu_type=None), offer("p", 2.0, gpu_count=8)])
    assert len(planner.plan({"p": p}, Requirements()).offers) == 2


def test_a_provider_that_raises_is_listed_with_its_reason_and_the_others_answer() -> None:
    providers = {
        "ok": ListProvider([offer("ok", 1.0)]),
        "auth": ListProvider(error=AuthFailed("auth: the API key was refused")),
        "small": ListProvider(error=InfeasibleRequest("small has no A100")),
        "broken": BrokenProvider(),
        "empty": ListProvider([]),
    }
    result = planner.plan(providers, req())
    assert ids(result) == ["ok:r1-1.0-od"]
    assert result.rejected["auth"] == "unavailable (auth: the API key was refused)"
    assert result.codes["auth"] == "auth_failed"
    assert (result.rejected["small"], result.codes["small"]) == ("small has no A100", "infeasible")
    assert result.codes["broken"] == "internal" and "KeyError" in result.rejected["broken"]
    assert "SECRET" not in result.explain() and "api_key" not in result.explain()
    assert (result.rejected["empty"], result.codes["empty"]) == (
        "no offer for this job",
        "no_offer",
    )


def test_providers_are_asked_at_the_same_time() -> None:
    """Each provider waits for all the others inside ``offers``: asked one after the other,
    the barrier would break and every provider would be rejected."""
    barrier = threading.Barrier(4, timeout=10)

    class Waiting(ListProvider):
        def offers(self, r: Requirements):
            barrier.wait()
            return super().offers(r)

    providers = {f"w{i}": Waiting([offer(f"w{i}", 1.0 + i)]) for i in range(4)}
    result = planner.plan(providers, req())
    assert result.rejected == {}
    assert [o.provider for o in result.offers] == ["w0", "w1", "w2", "w3"]


def test_refresh_prices_reloads_live_prices_and_explains_the_others() -> None:
    live = LivePriceProvider()
    LivePriceProvider.feed[:] = [1.25]
    providers = {"live": live, "plain": ListProvider([offer("plain", 2.0)])}
    before = planner.plan(providers, req()).offers[0]
    assert (before.provider, before.price_per_hour) == ("plain", 2.0)
    out = planner.refresh_prices(providers)
    assert out["live"] == {"refreshed": True, "prices_as_of": "2025-06-02T10:00:00Z", "reason": ""}
    assert out["plain"]["refreshed"] is False and "nothing to refresh" in out["plain"]["reason"]
    after = planner.plan(providers, req()).offers[0]
    assert (after.provider, after.price_per_hour, after.spot) == ("live", 1.25, True)
    failed = planner.refresh_prices({"live": live})  # the feed is empty: rate limited
    assert failed["live"]["refreshed"] is False
    assert "too many requests" in failed["live"]["reason"]


def test_launch_takes_the_cheapest_feasible_offer() -> None:
    """What ``launching.start_attempt`` relies on: ``plan().available`` in price order, within
    the price cap, the allow-list and the regions."""
    spec = SimpleNamespace(
        resources=SimpleNamespace(
            gpus=SimpleNamespace(type="A100", min=1, max=1),
            cpus=None,
            memory=None,
            disk=None,
            spot="auto",
            max_hourly_price=2.0,
            providers=["a", "b"],
            regions=["eu"],
        ),
        limits=SimpleNamespace(max_runtime=None),
    )
    providers = {
        "a": ListProvider([offer("a", 1.5, region="eu"), offer("a", 0.2, region="us")]),
        "b": ListProvider([offer("b", 0.9, region="eu", spot=True), offer("b", 2.1, region="eu")]),
        "c": ListProvider([offer("c", 0.1, region="eu")]),
    }
    result = planner.plan(providers, planner.requirements_from_spec(spec))
    assert [(o.provider, o.price_per_hour) for o in result.available] == [("b", 0.9), ("a", 1.5)]
