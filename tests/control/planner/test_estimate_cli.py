"""``corral estimate``: cost per offer, spot and on-demand side by side, flags, the choice."""

from __future__ import annotations

import pytest

from corral.errors import EXIT_BAD_INPUT

from .cli import run, run_json, write_spec

JOB = """
    name: est
    run: echo hi
    resources: {gpus: "A100:1", max_hourly_price: 1.9}
    budget: {max_cost_usd: 10}
    limits: {max_runtime: 6h}
"""


def rows_by_machine(data: dict) -> dict[str, dict]:
    return {r["machine"]: r for r in data["rows"]}


def test_cost_is_price_times_max_runtime_with_spot_and_on_demand_side_by_side(
    cloud, tmp_path
) -> None:
    data = run_json("estimate", write_spec(tmp_path, JOB))
    assert (data["hours"], data["hours_from"]) == (6.0, "limits.max_runtime")
    rows = rows_by_machine(data)
    assert list(rows) == ["a", "b", "full"]  # cheapest available first, no capacity last
    a = rows["a"]
    assert (a["provider"], a["region"], a["gpu_type"], a["gpu_count"]) == (
        "fake",
        "us-east",
        "A100",
        1,
    )
    assert a["spot"]["cost_usd"] == pytest.approx(0.5 * 6)
    assert a["on_demand"]["cost_usd"] == pytest.approx(2.0 * 6)
    assert a["spot_saving"] == pytest.approx(0.75)
    assert rows["b"]["on_demand"]["cost_usd"] == pytest.approx(1.8 * 6)
    assert a["spot"]["catalog_date"] == "2025-05-01"


def test_offers_over_the_budget_or_the_hourly_cap_are_flagged(cloud, tmp_path) -> None:
    rows = rows_by_machine(run_json("estimate", write_spec(tmp_path, JOB)))
    a_od, b_od = rows["a"]["on_demand"], rows["b"]["on_demand"]
    assert a_od["flags"] == ["over_max_hourly_price", "over_budget"]  # $2/h, $12
    assert a_od["budget_stop_after_h"] == pytest.approx(5.0)
    assert b_od["flags"] == ["over_budget"]  # $1.8/h is under the cap; $10.80 is not
    assert rows["a"]["spot"]["flags"] == [] and rows["b"]["spot"]["flags"] == []
    assert "unavailable" in rows["full"]["spot"]["flags"]


def test_the_offer_a_launch_would_take_is_marked(cloud, tmp_path) -> None:
    data = run_json("estimate", write_spec(tmp_path, JOB))
    assert data["chosen"] == {
        "provider": "fake",
        "region": "us-east",
        "machine": "a",
        "offer_id": "a:spot",
        "spot": True,
        "price_per_hour": 0.5,
        "cost_usd": 3.0,
    }
    marked = [
        (r["machine"], k) for r in data["rows"] for k in ("spot", "on_demand") if r[k]["chosen"]
    ]
    assert marked == [("a", "spot")]


def test_on_demand_only_specs_flag_the_spot_side_and_choose_on_demand(cloud, tmp_path) -> None:
    path = write_spec(tmp_path, JOB)
    data = run_json("estimate", path, "--set", "resources.spot=false", "--hours", "2")
    assert (data["hours"], data["hours_from"]) == (2.0, "--hours")
    rows = rows_by_machine(data)
    assert rows["b"]["spot"]["flags"] == ["excluded_by_resources_spot"]
    assert rows["b"]["on_demand"]["cost_usd"] == pytest.approx(3.6)
    assert rows["b"]["on_demand"]["flags"] == []  # $3.60 is within the budget for 2 h
    assert data["chosen"]["offer_id"] == "b:on-demand"


def test_without_max_runtime_or_hours_it_asks_for_hours(cloud, tmp_path) -> None:
    path = write_spec(tmp_path, "name: x\nrun: echo\nresources: {gpus: 'A100:1'}\n")
    code, _, err = run("estimate", path)
    assert code == EXIT_BAD_INPUT and "--hours" in err
    code, _, err = run("estimate", path, "--hours", "0")
    assert code == EXIT_BAD_INPUT
    data = run_json("estimate", path, "--hours", "1.5")
    assert data["chosen"]["cost_usd"] == pytest.approx(0.75)
    assert data["budget_usd"] is None


def test_table_shows_costs_marks_and_the_choice(cloud, tmp_path) -> None:
    code, out, err = run("estimate", write_spec(tmp_path, JOB))
    assert code == 0, err
    assert "6 h (limits.max_runtime)" in out and "budget $10.00" in out
    assert "$3.00 *" in out and "$12.00 pb" in out
    assert "launch would take fake/us-east a spot at $0.5/h: $3.00" in out
    assert "local:" in out  # no A100 on this machine: listed with its reason


def test_every_flag_of_an_estimate_has_a_mark_in_the_table() -> None:
    from typing import get_args

    from corral.cli.estimate import _MARKS
    from corral.service.plan_views import CostFlag

    assert set(_MARKS) == set(get_args(CostFlag))
