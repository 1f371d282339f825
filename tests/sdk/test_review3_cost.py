"""The 90% budget warning is given once per run, also across a resume through
``training_state(cost_usd=meter)`` (which stores the cost as a bare number)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, restore_training_state, training_state
from corral.sdk.cost import BudgetWarning, CostMeter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance_hours(self, hours: float) -> None:
        self.now += hours * 3600.0


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
    clock = Clock()
    meter = CostMeter(10.0, budget_usd=10.0, clock=clock)
    clock.advance_hours(0.92)
    with pytest.warns(BudgetWarning):
        meter.check(step=5)
    cp = Checkpointer(tmp_path / "ck")
    cp.save(training_state({}, step=5, cost_usd=meter), 5)  # preempted: saved, exit 75
    cp.wait()

    info = restore_training_state(Checkpointer(tmp_path / "ck").restore(), {})
    resumed = CostMeter(10.0, budget_usd=10.0, clock=Clock())  # the next attempt
    resumed.load_state_dict({"cost_usd": info["cost_usd"]})  # as the docs' loop does
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resumed.check(step=6) is False
    assert len(budget_records(progress)) == 1


def test_a_larger_budget_on_resume_warns_again_when_it_gets_to_90_percent():
    resumed = CostMeter(10.0, budget_usd=100.0, clock=(clock := Clock()))
    resumed.load_state_dict({"cost_usd": 9.2})  # warned against a budget of 10 before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resumed.check() is False  # 9% of this budget
    clock.advance_hours(8.2)
    with pytest.warns(BudgetWarning):
        resumed.check()


def test_a_saved_warned_false_is_honoured():
    resumed = CostMeter(10.0, budget_usd=10.0, clock=Clock())
    resumed.load_state_dict({"cost_usd": 9.5, "warned": False})  # e.g. no check() ran
    with pytest.warns(BudgetWarning):
        resumed.check()
