"""A job's cost on each offer that fits it, through the service: typed rows, the choice, the
pairing of spot and on-demand offers, bad hours."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from control.planner.helpers import offer, use_fake_cloud
from corral.errors import BadInput, NotFound
from corral.service.estimate import estimate_cost, pair_offers
from corral.service.plan_views import ChosenOffer, CostSide

JOB = """
    name: est
    run: echo hi
    resources: {gpus: "A100:1", max_hourly_price: 1.9}
    budget: {max_cost_usd: 10}
    limits: {max_runtime: 6h}
"""


def spec(tmp_path: Path, body: str = JOB) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def test_an_estimate_prices_both_kinds_and_names_the_offer_a_launch_would_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_fake_cloud(tmp_path, monkeypatch)
    found = estimate_cost(spec(tmp_path), overrides=["budget.max_cost_usd=11"])
    assert (found.hours, found.hours_from, found.budget_usd) == (6.0, "limits.max_runtime", 11.0)
    assert found.chosen == ChosenOffer(
        provider="fake",
        region="us-east",
        machine="a",
        offer_id="a:spot",
        spot=True,
        price_per_hour=0.5,
        cost_usd=3.0,
    )
    first = found.rows[0]
    assert (first.machine, first.spot_saving) == ("a", 0.75)
    assert isinstance(first.on_demand, CostSide)
    assert first.on_demand.flags == ["over_max_hourly_price", "over_budget"]
    assert first.on_demand.budget_stop_after_h == 5.5
    assert [r.machine for r in found.rows] == ["a", "b", "full"]
    assert {p.provider for p in found.providers} == {"fake", "local"}


def test_hours_must_be_above_zero_or_come_from_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_fake_cloud(tmp_path, monkeypatch)
    with pytest.raises(BadInput, match="--hours 0: expected a number of hours above 0"):
        estimate_cost(spec(tmp_path), hours=0)
    no_limit = spec(tmp_path, "name: est\nrun: echo hi\n")
    with pytest.raises(BadInput, match=r"no limits\.max_runtime"):
        estimate_cost(no_limit)
    with pytest.raises(NotFound, match="spec file not found"):
        estimate_cost(tmp_path / "missing.yaml", hours=1)


def test_offers_pair_by_machine_name_else_by_hardware() -> None:
    named = [
        offer("p", 1.0, spot=True, details={"machine": "m1"}, offer_id="x1"),
        offer("p", 3.0, details={"machine": "m1"}, offer_id="x2"),
        offer("p", 2.0, details={"machine": "m2"}, offer_id="x3"),
    ]
    pairs = pair_offers(named)
    assert [(p.machine, p.spot is not None, p.on_demand is not None) for p in pairs] == [
        ("m1", True, True),
        ("m2", False, True),
    ]
    bare = [
        offer("q", 1.0, spot=True, cpus=8, memory_gb=64, offer_id="s"),
        offer("q", 2.0, cpus=8, memory_gb=64, offer_id="o"),
        offer("q", 1.5, spot=True, cpus=8, memory_gb=64, offer_id="s2"),
        offer("q", 2.0, region="r2", cpus=8, memory_gb=64, offer_id="other-region"),
    ]
    assert [
        (p.region, p.spot and p.spot.offer_id, p.on_demand and p.on_demand.offer_id)
        for p in pair_offers(bare)
    ] == [
        ("r1", "s", "o"),
        ("r1", "s2", None),
        ("r2", None, "other-region"),
    ]
