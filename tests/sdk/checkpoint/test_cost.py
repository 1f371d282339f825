"""The cost meter, on a fake clock: price x time + earlier attempts, budget warn/stop, resume."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from corral.errors import BadInput
from corral.sdk import Checkpointer, CostMeter, restore_training_state, should_stop, training_state
from corral.sdk import signals as sig
from corral.sdk.cost import BudgetWarning


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance_hours(self, hours: float) -> None:
        self.now += hours * 3600


def test_cost_is_price_times_elapsed_hours_plus_offset():
    clock = FakeClock()
    meter = CostMeter(2.0, offset_usd=1.5, clock=clock)
    assert meter.cost_usd() == 1.5
    clock.advance_hours(3)
    assert meter.cost_usd() == pytest.approx(7.5)
    assert meter.elapsed_s() == pytest.approx(3 * 3600)
    assert meter.as_metrics() == {"cost_usd": 7.5}


def test_settings_come_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv("CORRAL_HOURLY_PRICE", "0.5")
    monkeypatch.setenv("CORRAL_BUDGET_USD", "10")
    monkeypatch.setenv("CORRAL_COST_OFFSET_USD", "4")
    clock = FakeClock()
    meter = CostMeter(clock=clock)
    clock.advance_hours(2)
    assert (meter.hourly_price, meter.budget_usd, meter.cost_usd()) == (0.5, 10.0, 5.0)
    assert CostMeter(1.0, budget_usd=3, offset_usd=0, clock=clock).budget_usd == 3.0


def test_no_price_anywhere_costs_nothing():
    clock = FakeClock()
    meter = CostMeter(clock=clock)
    clock.advance_hours(100)
    assert meter.cost_usd() == 0.0
    assert meter.check() is False  # no budget: never stops


def test_invalid_values_are_bad_input(monkeypatch):
    with pytest.raises(BadInput, match="hourly_price"):
        CostMeter(-1)
    monkeypatch.setenv("CORRAL_HOURLY_PRICE", "cheap")
    with pytest.raises(BadInput, match="CORRAL_HOURLY_PRICE"):
        CostMeter()
    with pytest.raises(BadInput, match="warn_fraction"):
        CostMeter(1.0, warn_fraction=1.5)


def test_check_warns_once_at_90_percent_and_requests_stop_at_100(tmp_path: Path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    clock = FakeClock()
    meter = CostMeter(10.0, budget_usd=10.0, clock=clock)
    clock.advance_hours(0.85)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert meter.check(step=1) is False  # 85%: nothing yet
    clock.advance_hours(0.06)
    with pytest.warns(BudgetWarning, match=r"\$9.10 is 91% of the \$10.00 budget"):
        assert meter.check(step=2) is False
    record = json.loads(progress.read_text().splitlines()[-1])
    assert record["kind"] == "metrics" and record["step"] == 2
    assert record["metrics"]["cost_usd"] == pytest.approx(9.1)
    assert record["metrics"]["budget_fraction"] == pytest.approx(0.91)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert meter.check(step=3) is False  # warned once only
        assert not should_stop()
        clock.advance_hours(0.09)
        assert meter.check(step=4) is True  # 100%
    assert should_stop() and sig.stop_reason() == "budget"


def test_state_round_trip_continues_from_the_saved_cost():
    clock = FakeClock()
    meter = CostMeter(4.0, clock=clock)
    clock.advance_hours(1)
    saved = meter.state_dict()
    assert saved["cost_usd"] == 4.0

    clock2 = FakeClock()
    resumed = CostMeter(4.0, clock=clock2)  # a plain restart: no controller offset
    resumed.load_state_dict(saved)
    assert resumed.cost_usd() == 4.0
    clock2.advance_hours(0.5)
    assert resumed.cost_usd() == 6.0


def test_resume_takes_the_larger_of_saved_cost_and_controller_offset():
    saved = {"cost_usd": 4.0}
    bigger_offset = CostMeter(4.0, offset_usd=5.0, clock=FakeClock())  # lost work was billed
    bigger_offset.load_state_dict(saved)
    assert bigger_offset.cost_usd() == 5.0
    smaller_offset = CostMeter(4.0, offset_usd=3.0, clock=FakeClock())
    smaller_offset.load_state_dict(saved)
    smaller_offset.load_state_dict(saved)  # loading twice does not add up
    assert smaller_offset.cost_usd() == 4.0


def test_time_metered_before_loading_the_checkpoint_still_counts():
    clock = FakeClock()
    meter = CostMeter(2.0, clock=clock)
    clock.advance_hours(0.25)  # model loading before the restore
    meter.load_state_dict({"cost_usd": 10.0})
    assert meter.cost_usd() == 10.5


def test_a_warning_given_before_the_restart_is_not_repeated():
    clock = FakeClock()
    meter = CostMeter(1.0, budget_usd=10.0, clock=clock)
    meter.load_state_dict({"cost_usd": 9.5, "warned": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert meter.check() is False
    bigger_budget = CostMeter(1.0, budget_usd=100.0, clock=clock)
    bigger_budget.load_state_dict({"cost_usd": 9.5, "warned": True})
    clock.advance_hours(85)
    with pytest.warns(BudgetWarning):
        bigger_budget.check()


# The 90% budget warning is given once per run, also across a resume through
# ``training_state(cost_usd=meter)`` (which stores the cost as a bare number).


def budget_records(progress: Path) -> list[dict]:
    if not progress.exists():
        return []
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    return [r for r in records if r["kind"] == "metrics" and "budget_fraction" in r["metrics"]]


def test_the_budget_warning_is_not_repeated_after_a_resume_from_training_state(
    tmp_path, monkeypatch
):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    clock = FakeClock()
    meter = CostMeter(10.0, budget_usd=10.0, clock=clock)
    clock.advance_hours(0.92)
    with pytest.warns(BudgetWarning):
        meter.check(step=5)
    cp = Checkpointer(tmp_path / "ck")
    cp.save(training_state({}, step=5, cost_usd=meter), 5)  # preempted: saved, exit 75
    cp.wait()

    info = restore_training_state(Checkpointer(tmp_path / "ck").restore(), {})
    resumed = CostMeter(10.0, budget_usd=10.0, clock=FakeClock())  # the next attempt
    resumed.load_state_dict({"cost_usd": info["cost_usd"]})  # as the docs' loop does
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resumed.check(step=6) is False
    assert len(budget_records(progress)) == 1


def test_a_larger_budget_on_resume_warns_again_when_it_gets_to_90_percent():
    resumed = CostMeter(10.0, budget_usd=100.0, clock=(clock := FakeClock()))
    resumed.load_state_dict({"cost_usd": 9.2})  # warned against a budget of 10 before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resumed.check() is False  # 9% of this budget
    clock.advance_hours(8.2)
    with pytest.warns(BudgetWarning):
        resumed.check()


def test_a_saved_warned_false_is_honoured():
    resumed = CostMeter(10.0, budget_usd=10.0, clock=FakeClock())
    resumed.load_state_dict({"cost_usd": 9.5, "warned": False})  # e.g. no check() ran
    with pytest.warns(BudgetWarning):
        resumed.check()
