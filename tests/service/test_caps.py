"""Spending caps at launch on one's own machine: the run's expected cost, the CLI's refusal
in one line (nothing recorded), the owner taken from ``CORRAL_USER``, and ``corral budget``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from control.helpers import write_spec
from corral.cli.app import app
from corral.providers.base import Offer
from corral.service.caps import expected_cost, launcher, list_caps, set_cap
from corral.spec import load_spec_text
from corral.store import Store


def _offer(price: float) -> Offer:
    return Offer(provider="x", offer_id=f"x-{price}", price_per_hour=price)


def _spec(text: str):
    return load_spec_text("name: j\nrun: 'true'\n" + text)


def test_a_runs_expected_cost_is_its_budget_else_its_runtime_else_an_hour() -> None:
    cheap = [_offer(3.0), _offer(2.0)]
    assert expected_cost(_spec("budget: {max_cost_usd: 5}\n"), cheap) == (5.0, "its budget")
    # a budget larger than the price over the runtime limit: the runtime says more
    cost, why = expected_cost(
        _spec("budget: {max_cost_usd: 50}\nlimits: {max_runtime: 2h}\n"), cheap
    )
    assert (cost, why) == (4.0, "$2.00/h for limits.max_runtime")
    cost, why = expected_cost(_spec(""), cheap)
    assert cost == 2.0 and why.startswith("an hour at $2.00/h")
    assert expected_cost(_spec("budget: {max_cost_usd: 5}\n"), [_offer(0.0)]) == (0.0, "free")


def test_the_launcher_is_corral_user_else_the_login_name() -> None:
    assert launcher({"CORRAL_USER": "dana"}) == "dana"
    assert launcher({}) not in ("", "dana")


def test_a_launch_past_a_cap_is_refused_in_one_line_and_nothing_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "2.0")
    monkeypatch.setenv("CORRAL_USER", "dana")
    set_cap("user", "dana", 4.0)
    set_cap("project", "vision", 100.0, period="total")
    spec = write_spec(tmp_path, "name: big\nproject: vision\nrun: 'true'\n")
    # the default cap ($10) is the expected cost: over dana's $4
    out = CliRunner().invoke(app, ["launch", str(spec), "--detach"])
    assert out.exit_code != 0
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1, out.output
    assert "spending cap of user 'dana' ($4.00, " in lines[0] and "$4.00 left" in lines[0]
    assert "$10.00 (its budget)" in lines[0]
    assert Store.open().list_runs() == []
    # someone else's launch is not counted against dana's cap
    monkeypatch.setenv("CORRAL_USER", "erin")
    out = CliRunner().invoke(app, ["launch", str(spec), "--detach"])
    assert out.exit_code == 0, out.output
    [run] = Store.open().list_runs()
    assert Store.open().run_owner(run.id) == ("erin", "vision")
    shown = json.loads(CliRunner().invoke(app, ["budget", "--json"]).stdout)
    assert {(c["scope"], c["subject"]) for c in shown["caps"]} == {
        ("project", "vision"),
        ("user", "dana"),
    }
    labels = [c.period_label for c in list_caps().caps]
    assert labels[0] == "total" and len(labels[1]) == 7  # YYYY-MM
