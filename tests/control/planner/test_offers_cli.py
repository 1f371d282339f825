"""``corral offers``: sorting, filters, unavailable last, dates, refresh, failing providers."""

from __future__ import annotations

import pytest

from corral.errors import EXIT_BAD_INPUT

from .cli import run, run_json
from .helpers import BrokenProvider, LivePriceProvider, register


def kinds(data: dict) -> list[str]:
    return [f"{o['offer_id']}@{o['price_per_hour']:g}" for o in data["offers"]]


def test_offers_are_sorted_by_price_with_unavailable_ones_last(cloud) -> None:
    data = run_json("offers", "--gpus", "A100:1")
    assert kinds(data) == [
        "a:spot@0.5",
        "b:spot@0.6",
        "b:on-demand@1.8",
        "a:on-demand@2",
        "full:spot@0.1",
        "full:on-demand@0.3",
    ]
    assert [o["available"] for o in data["offers"]] == [True] * 4 + [False] * 2
    assert data["offers"][-1]["availability"] == "none"
    first = data["offers"][0]
    assert (first["provider"], first["region"], first["gpu_type"], first["gpu_count"]) == (
        "fake",
        "us-east",
        "A100",
        1,
    )
    assert first["spot"] is True and first["catalog_date"] == "2025-05-01"
    assert data["count"] == 6


def test_a_provider_without_offers_is_listed_with_its_reason(cloud) -> None:
    data = run_json("offers", "--gpus", "A100:1")
    rows = {p["provider"]: p for p in data["providers"]}
    assert rows["fake"] == {
        "provider": "fake",
        "offers": 6,
        "available": 4,
        "reason": None,
        "code": None,
    }
    assert rows["local"]["code"] == "infeasible" and "A100" in rows["local"]["reason"]
    assert [p["provider"] for p in data["providers"]] == ["fake", "local"]


@pytest.mark.parametrize(
    ("flag", "spot"), [("--spot", [True]), ("--on-demand", [False])], ids=["spot", "on-demand"]
)
def test_spot_and_on_demand_flags_keep_one_kind(cloud, flag: str, spot: list[bool]) -> None:
    data = run_json("offers", "--gpus", "A100:1", flag)
    assert {o["spot"] for o in data["offers"]} == set(spot)
    assert len(data["offers"]) == 3


def test_region_max_price_and_provider_filters(cloud) -> None:
    eu = run_json("offers", "--gpus", "A100:1", "--region", "eu-west")
    assert kinds(eu) == ["b:spot@0.6", "b:on-demand@1.8"]
    cheap = run_json("offers", "--gpus", "A100:1", "--max-price", "0.55")
    assert kinds(cheap) == ["a:spot@0.5", "full:spot@0.1", "full:on-demand@0.3"]
    only_fake = run_json("offers", "--gpus", "L40S:1", "--provider", "fake")
    assert [p["provider"] for p in only_fake["providers"]] == ["fake"]
    assert kinds(only_fake) == ["l40s:spot@0.3", "l40s:on-demand@1"]
    both = run_json("offers", "--gpus", "L40S:1")
    assert "local" in {o["provider"] for o in both["offers"]}


def test_no_gpu_request_lists_every_machine(cloud) -> None:
    data = run_json("offers", "--provider", "fake")
    assert len(data["offers"]) == 10


def test_bad_arguments_exit_with_code_2(cloud) -> None:
    code, _, err = run("offers", "--spot", "--on-demand")
    assert code == EXIT_BAD_INPUT and "exclude each other" in err
    code, _, err = run("offers", "--gpus", "A100:x")
    assert code == EXIT_BAD_INPUT and "--gpus" in err
    code, _, err = run("offers", "--provider", "runpdo")
    assert code == EXIT_BAD_INPUT and "unknown provider" in err
    code, _, err = run("offers", "--max-price", "-1")
    assert code == EXIT_BAD_INPUT and "--max-price" in err


def test_a_failing_provider_is_listed_and_shows_no_secret(cloud, monkeypatch) -> None:
    register(monkeypatch, "broken", BrokenProvider)
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake,broken,nosuch")
    code, out, err = run("offers", "--gpus", "A100:1", "--json")
    assert code == 0, err
    assert "SECRET" not in out + err and "api_key" not in out + err
    code, text, err = run("offers", "--gpus", "A100:1")
    assert code == 0, err
    assert "providers without offers" in text and "KeyError" in text
    assert "nosuch: unknown provider" in text
    assert "SECRET" not in text + err


def test_table_shows_the_catalog_date_and_unavailable_offers_last(cloud) -> None:
    code, out, err = run("offers", "--gpus", "A100:1", "--limit", "5")
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("fake")]
    assert len(lines) == 5
    assert "0.500" in lines[0] and "2025-05-01" in lines[0] and "spot" in lines[0]
    assert "0.100" in lines[4] and "none" in lines[4]
    assert "(1 more; --limit to see them)" in out


def test_refresh_reloads_live_prices_where_a_provider_publishes_them(cloud, monkeypatch) -> None:
    register(monkeypatch, "live", LivePriceProvider)
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake,live")
    LivePriceProvider.feed[:] = [0.05]
    plain = run_json("offers", "--gpus", "A100:1")
    assert "refresh" not in plain
    assert plain["offers"][0]["offer_id"] == "a:spot"  # live spot at its cached 3.0
    data = run_json("offers", "--gpus", "A100:1", "--refresh")
    assert data["refresh"]["live"] == {
        "refreshed": True,
        "prices_as_of": "2025-06-02T10:00:00Z",
        "reason": "",
    }
    assert data["refresh"]["fake"]["refreshed"] is False
    assert (data["offers"][0]["provider"], data["offers"][0]["price_per_hour"]) == ("live", 0.05)
    code, out, _ = run("offers", "--gpus", "A100:1", "--refresh")  # the feed is dry now
    assert code == 0
    assert "live: prices not reloaded: unavailable (live: too many requests" in out
