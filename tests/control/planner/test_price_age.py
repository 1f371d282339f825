"""Prices that say how old they are: ``corral offers`` and ``corral estimate`` warn about a
provider whose price catalog is over 60 days old (the clock injected), and their JSON carries
``stale_prices``; live and simulated prices never warn."""

from __future__ import annotations

from datetime import date

import pytest

from corral.providers.base import Offer
from corral.service import price_age
from corral.service.estimate import estimate_cost
from corral.service.offers import list_offers

from .cli import run, run_json, write_spec

JOB = """
    name: est
    run: echo hi
    resources: {gpus: "A100:1"}
    limits: {max_runtime: 2h}
"""


def offer(provider: str, catalog_date: str | None) -> Offer:
    return Offer(provider=provider, offer_id="x", catalog_date=catalog_date)


def test_only_catalogs_over_sixty_days_old_warn_once_per_provider():
    offers = [
        offer("cat", "2025-05-01"),
        offer("cat", "2025-06-15"),  # the oldest of a provider counts
        offer("live", "2025-07-01T09:30:00+00:00"),  # fetched today
        offer("sim", "simulated"),
        offer("none", None),
        offer("edge", "2025-05-02"),  # exactly 60 days: not yet
    ]
    [stale] = price_age.stale_prices(offers, today=date(2025, 7, 1))
    assert (stale.provider, stale.catalog_date, stale.age_days) == ("cat", "2025-05-01", 61)
    assert "cat: prices come from a catalog of 2025-05-01, 61 days old (over 60)" in stale.message
    assert price_age.stale_prices(offers, today=date(2025, 6, 30)) == []


def test_offers_and_estimate_carry_the_warning(cloud, tmp_path):
    fresh, old = date(2025, 5, 20), date(2025, 8, 1)
    assert list_offers(gpus="A100:1", today=fresh).stale_prices is None
    [stale] = list_offers(gpus="A100:1", today=old).stale_prices or []
    assert (stale.provider, stale.age_days) == ("fake", 92)
    spec = write_spec(tmp_path, JOB)
    assert estimate_cost(spec, today=fresh).stale_prices is None
    [stale] = estimate_cost(spec, today=old).stale_prices or []
    assert stale.provider == "fake"
    assert "stale_prices" not in list_offers(gpus="A100:1", today=fresh).to_json()


@pytest.mark.parametrize("command", ["offers", "estimate"])
def test_the_cli_warns_on_stderr_and_says_it_in_json(cloud, tmp_path, monkeypatch, command):
    args = (
        ["offers", "--gpus", "A100:1"]
        if command == "offers"
        else ["estimate", write_spec(tmp_path, JOB)]
    )
    monkeypatch.setattr(price_age, "today_fn", lambda: date(2026, 11, 25))
    code, out, err = run(*args)
    assert code == 0, err
    assert "warning: fake: prices come from a catalog of 2025-05-01, 573 days old" in err
    assert "warning" not in out
    data = run_json(*args)
    assert [s["provider"] for s in data["stale_prices"]] == ["fake"]
    monkeypatch.setattr(price_age, "today_fn", lambda: date(2025, 5, 2))
    code, out, err = run(*args)
    assert code == 0 and "warning" not in err
    assert "stale_prices" not in run_json(*args)
