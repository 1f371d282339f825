"""Offers from RunPod's GPU types: prices for the whole pod, availability from stock, spot and
on-demand, feasibility, regions (data centers), cached prices and their refresh."""

from __future__ import annotations

import pytest

from corral.errors import InfeasibleRequest
from corral.providers.base import Requirements
from corral.providers.runpod.gpus import canonical_name, matches


@pytest.mark.parametrize(
    ("gpu_id", "name"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 NVL", "H100"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA GeForce RTX 3080 Ti", "RTX3080TI"),
        ("NVIDIA RTX A6000", "RTXA6000"),
        ("NVIDIA  RTX A4500", "RTXA4500"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000ADA"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("AMD Instinct MI300X OAM", "MI300X"),
    ],
)
def test_runpod_gpu_ids_get_the_names_jobs_use(gpu_id, name):
    assert canonical_name(gpu_id) == name
    assert matches(gpu_id, "", name.lower()) and matches(gpu_id, "", None)
    assert not matches(gpu_id, "", "T4")


def test_offers_price_the_whole_pod_for_the_gpus_asked(make_provider):
    p = make_provider()
    offers = p.offers(Requirements(gpu_type="A100", gpu_count_min=2, gpu_count_max=2))
    got = {(o.details["cloud_type"], o.spot): o.price_per_hour for o in offers}
    assert got == {
        ("SECURE", False): 3.78,
        ("SECURE", True): 2.38,
        ("COMMUNITY", False): 2.78,
        ("COMMUNITY", True): 1.78,
    }
    for o in offers:
        assert (o.provider, o.gpu_type, o.gpu_count, o.region) == ("runpod", "A100", 2, "any")
        assert o.details["gpu_type_id"] == "NVIDIA A100-SXM4-80GB" and o.catalog_date
        assert o.available and o.availability == "high"
        assert o.details.get("bid_per_gpu") == (o.price_per_hour / 2 if o.spot else None)
    assert [o.price_per_hour for o in offers] == sorted(o.price_per_hour for o in offers)


def test_stock_maps_to_availability_and_no_stock_is_unavailable(make_provider, fake):
    fake.cloud.gpus["NVIDIA A100-SXM4-80GB"].capacity = {"SECURE": 2, "COMMUNITY": 0}
    p = make_provider()
    offers = p.offers(Requirements(gpu_type="A100", gpu_count_min=2, spot=False))
    by_cloud = {o.details["cloud_type"]: o for o in offers}
    assert by_cloud["SECURE"].availability == "low" and by_cloud["SECURE"].available
    community = by_cloud["COMMUNITY"]
    assert community.availability == "none" and not community.available
    assert "no NVIDIA A100-SXM4-80GB x2 in stock" in community.details["unavailable_reason"]
    assert offers[-1] is community  # unavailable last


def test_spot_on_demand_price_and_cloud_limits(make_provider):
    p = make_provider(cloud_types=["SECURE"])
    spot = p.offers(Requirements(gpu_type="L40S", gpu_count_min=1, spot=True))
    assert {(o.spot, o.details["cloud_type"]) for o in spot} == {(True, "SECURE")}
    cheap = p.offers(Requirements(gpu_count_min=1, max_hourly_price=0.5))
    assert cheap and all(o.price_per_hour <= 0.5 for o in cheap)
    assert {o.gpu_type for o in cheap} == {"RTX4090", "L40S"}
    h100 = make_provider().offers(Requirements(gpu_type="H100", gpu_count_min=1))
    assert {o.details["cloud_type"] for o in h100} == {"SECURE"}  # no community price


def test_gpus_runpod_does_not_have_are_infeasible(make_provider):
    p = make_provider()
    with pytest.raises(InfeasibleRequest, match="runpod has no T4 GPUs"):
        p.offers(Requirements(gpu_type="T4", gpu_count_min=1))
    with pytest.raises(InfeasibleRequest, match="at most 8 L40S GPUs; the job needs 16"):
        p.offers(Requirements(gpu_type="L40S", gpu_count_min=16))
    with pytest.raises(
        InfeasibleRequest, match="none of the regions us-east-1 is a RunPod data center"
    ):
        p.offers(Requirements(regions=["us-east-1"]))


def test_regions_name_data_centers_the_pod_is_pinned_to(make_provider, fake, tmp_path):
    p = make_provider()
    offers = p.offers(Requirements(gpu_type="L40S", gpu_count_min=1, regions=["EU-RO-1", "x"]))
    assert offers and {o.region for o in offers} == {"EU-RO-1"}
    assert all(o.details["data_center_id"] == "EU-RO-1" for o in offers)


def test_prices_are_cached_and_refresh_reloads_them(make_provider, fake):
    p = make_provider(price_cache_s=600)
    req = Requirements(gpu_type="L40S", gpu_count_min=1, spot=False)
    before = min(o.price_per_hour for o in p.offers(req))
    fake.cloud.gpus["NVIDIA L40S"].prices["communityPrice"] = 0.55
    assert min(o.price_per_hour for o in p.offers(req)) == before
    assert fake.routes("GET /v2/catalog/gpus") == ["GET /v2/catalog/gpus"] * 2  # two clouds
    assert fake.routes("graphql:") == []  # no spot price needed for an on-demand job
    fetched = p.refresh_prices()
    assert fetched and fetched[:4].isdigit()
    assert min(o.price_per_hour for o in p.offers(req)) == 0.55


def test_offers_for_other_providers_ask_runpod_nothing(make_provider, fake):
    assert make_provider().offers(Requirements(providers=["aws"])) == []
    assert fake.seen == []
