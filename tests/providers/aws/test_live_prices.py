"""On-demand prices read live from the AWS Price List API (a loopback fake checked against
botocore's model of it: moto has no ``pricing``), cached with the time they were read, the
catalog's where the API cannot be read; every offer says where its price came from and when;
a region or GPU type AWS has no price for is one line naming it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from corral.errors import BadInput, InfeasibleRequest
from corral.providers.aws.prices import RETRY_FAILED_S
from corral.providers.aws.settings import settings_from_env
from corral.providers.base import Requirements
from pricing.fake_price_list import FakePriceList, product

A10G = Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=1, spot=False)
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def live() -> Iterator[FakePriceList]:
    a10g = dict(vcpu=4, memory="16 GiB", gpu="1", gpu_memory="24 GB")
    fake = FakePriceList(
        [
            product("g5.xlarge", "us-east-1", 0.9, **a10g),
            product("g5.xlarge", "us-west-2", 0.95, **a10g),
            product("g5.xlarge", "us-east-1", 2.0, **a10g, os_="Windows"),
            product("m5.large", "us-east-1", 0.096, vcpu=2, memory="8 GiB"),
        ],
        page_size=1,
    )
    yield fake
    fake.close()


def by_type(offers):
    return {o.details["instance_type"]: o for o in offers}


def test_on_demand_prices_come_live_from_the_price_list_with_the_time_they_were_read(
    make_provider, live
):
    clock = Clock()
    p = make_provider(endpoints={"pricing": live.url}, clock=clock)
    offers = by_type(p.offers(A10G))
    g5 = offers["g5.xlarge"]
    read_at = datetime.fromtimestamp(T0, UTC).isoformat(timespec="seconds")
    assert g5.price_per_hour == 0.9 and g5.details["on_demand_price"] == 0.9
    assert g5.details["price_source"] == "AWS Price List API"
    assert g5.details["price_at"] == read_at and g5.catalog_date == read_at
    # a type the Price List did not answer for keeps the catalog's price, and says so
    other = offers["g5.2xlarge"]
    assert other.price_per_hour == p.catalog.entry("g5.2xlarge").prices["us-east-1"]
    assert other.details["price_source"] == f"catalog {p.catalog.date}"
    assert other.catalog_date == p.catalog.date
    # one query for the region: its GPU instances, Linux, shared, on-demand; every page read
    asked = [r for r in live.requests if r["target"].endswith("GetProducts")]
    assert len(asked) == 1  # one product matched: one page
    filters = {f["Field"]: f["Value"] for f in asked[0]["Filters"]}
    assert filters["regionCode"] == "us-east-1" and filters["instanceFamily"] == "GPU instance"
    assert filters["operatingSystem"] == "Linux" and filters["capacitystatus"] == "Used"
    assert asked[0]["ServiceCode"] == "AmazonEC2"
    # cached until price_cache_s is over, or a refresh
    p.offers(A10G)
    assert len(live.requests) == 1
    clock.now += p.settings.price_cache_s + 1
    p.offers(A10G)
    assert len(live.requests) == 2
    p.refresh()
    p.offers(A10G)
    assert len(live.requests) == 3
    live.assert_clean()


def test_spot_offers_carry_the_live_on_demand_price_beside_their_own(make_provider, live):
    p = make_provider(endpoints={"pricing": live.url}, regions=["us-east-1", "us-west-2"])
    spot = [o for o in p.offers(A10G.model_copy(update={"spot": True}))]
    g5 = [o for o in spot if o.details["instance_type"] == "g5.xlarge"]
    assert g5 and all(o.details["price_source"] == "describe_spot_price_history" for o in g5)
    assert {o.details["on_demand_price"] for o in g5 if o.region == "us-west-2"} == {0.95}
    live.assert_clean()


def test_without_the_price_list_the_catalog_prices_are_used_and_the_failure_said_once(
    make_provider, live, caplog
):
    def denied(target: str, body: dict) -> tuple[int, dict]:
        live.requests.append(body)
        return 400, {"__type": "AccessDeniedException", "message": "no pricing:GetProducts"}

    live.answer = denied  # type: ignore[method-assign]
    clock = Clock()
    p = make_provider(endpoints={"pricing": live.url}, clock=clock)
    with caplog.at_level(logging.WARNING, logger="corral.providers.aws"):
        first = by_type(p.offers(A10G))
        p.offers(A10G)
    g5 = first["g5.xlarge"]
    assert g5.price_per_hour == p.catalog.entry("g5.xlarge").prices["us-east-1"]
    assert g5.details["price_source"] == f"catalog {p.catalog.date}"
    said = [r.getMessage() for r in caplog.records if "Price List API failed" in r.getMessage()]
    assert len(said) == 1 and "us-east-1" in said[0] and "\n" not in said[0]
    assert len(live.requests) == 1  # the failure is not asked again at once
    clock.now += RETRY_FAILED_S + 1
    p.offers(A10G)
    assert len(live.requests) == 2


def test_live_prices_can_be_turned_off(make_provider, live):
    p = make_provider(endpoints={"pricing": live.url}, live_prices=False)
    g5 = by_type(p.offers(A10G))["g5.xlarge"]
    assert g5.details["price_source"] == f"catalog {p.catalog.date}" and live.requests == []


def test_a_gpu_type_or_region_no_price_source_knows_is_one_line_naming_it(make_provider):
    p = make_provider()
    with pytest.raises(InfeasibleRequest) as exc:
        p.offers(Requirements(gpu_type="H300", gpu_count_min=1))
    assert str(exc.value.message).startswith("aws has no instance type with 'H300' GPUs (known: ")
    assert "\n" not in exc.value.message
    with pytest.raises(InfeasibleRequest, match=r"^aws has no region 'mars-north-1' ") as exc:
        p.offers(A10G.model_copy(update={"regions": ["mars-north-1"]}))
    assert "\n" not in exc.value.message
    # among regions of other providers, AWS's own are still offered
    regions = {
        o.region for o in p.offers(A10G.model_copy(update={"regions": ["EU-RO-1", "us-east-1"]}))
    }
    assert regions == {"us-east-1"}
    with pytest.raises(BadInput, match=r"^aws provider: CORRAL_AWS_REGIONS: .*'useast1' is not"):
        settings_from_env({"CORRAL_AWS_REGIONS": "us-east-1,useast1"})
