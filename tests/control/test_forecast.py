"""The forecast: what a run will cost in all from its progress rate and its price; shown by
``corral status``, and ``budget.on_forecast_over`` stops (or warns about) a run that will
overrun its budget long before the cap is spent, never one that will finish within it, and
never before the run is a tenth of the way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.control.context import Settings
from corral.pricing.forecast import MIN_FRACTION, forecast
from corral.store import Store

from .helpers import submit, write_spec
from .test_watchers import drive

STEPS = 60


def _stages(*progress: dict | None) -> dict:
    return {
        "stages": [
            {"name": f"s{i}", "state": "running", "progress": p} for i, p in enumerate(progress)
        ]
    }


def test_the_forecast_is_the_cost_so_far_plus_the_price_over_the_longest_eta() -> None:
    status = _stages({"step": 50, "total": 100, "eta_s": 1800}, {"percent": 80.0, "eta_s": 600})
    ahead = forecast(2.0, 4.0, status)
    assert ahead is not None
    assert (ahead.cost_usd, ahead.finish_in_s, ahead.fraction) == (4.0, 1800, 0.5)
    # not before every running stage is a tenth of the way; not without an ETA
    early = _stages({"step": 5, "total": 100, "eta_s": 100}, {"percent": 80.0, "eta_s": 60})
    assert MIN_FRACTION == 0.10 and forecast(2.0, 4.0, early) is None
    assert forecast(2.0, 4.0, _stages({"step": 50, "total": 100})) is None
    assert forecast(2.0, 4.0, {"stages": [{"name": "a", "state": "succeeded"}]}) is None
    assert forecast(2.0, 4.0, None) is None


def _job(tmp_path: Path, budget: float, action: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(
        "import time\nfrom corral.sdk import report\n"
        f"for i in range(1, {STEPS + 1}):\n    time.sleep(0.1)\n    report(step=i, total={STEPS})\n"
    )
    return submit(
        write_spec(
            tmp_path,
            f"""
            name: forecast
            budget: {{max_cost_usd: {budget}, on_forecast_over: {action}}}
            run: {sys.executable} {script}
            """,
        )
    )


SETTINGS = Settings(tick_seconds=0.1, budget_stop_estimate_s=0.1)


@pytest.mark.slow
def test_a_run_that_will_overrun_is_stopped_long_before_the_cap(tmp_path: Path) -> None:
    run_id = _job(tmp_path, 5.0, "stop")  # 6 s of steps at $1 a second: about $7 in all
    store = Store.open()
    run = drive(store, run_id, price=3600.0, settings=SETTINGS)
    assert (run.state, run.reason) == ("STOPPED", "budget")
    [stopped] = store.events(run_id, types=["budget.stop"])
    assert stopped.data["by"] == "forecast" and stopped.data["forecast_cost_usd"] > 5.5
    assert run.cost_usd < 5.0, run.cost_usd  # stopped by the forecast, before the cap


@pytest.mark.slow
def test_a_run_that_will_finish_in_budget_is_left_alone(tmp_path: Path) -> None:
    run_id = _job(tmp_path, 20.0, "stop")
    store = Store.open()
    run = drive(store, run_id, price=3600.0, settings=SETTINGS)
    assert run.state == "SUCCEEDED", run.reason
    assert not store.events(run_id, types=["budget.forecast", "budget.stop"])


@pytest.mark.slow
def test_warn_says_it_once_and_the_run_goes_on(tmp_path: Path) -> None:
    run_id = _job(tmp_path, 5.0, "warn")
    store = Store.open()
    # warned once (at a tenth of the way or so), then stopped at the $5 cap as ever
    run = drive(store, run_id, price=3600.0, settings=SETTINGS)
    forecasts = store.events(run_id, types=["budget.forecast"])
    assert len(forecasts) == 1
    assert "over its $5.00 budget" in forecasts[0].reason
    assert forecasts[0].data["forecast_cost_usd"] > 5.5
    assert run.reason == "budget"  # then the cap itself, as ever
