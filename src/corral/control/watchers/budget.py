"""The budget watcher."""

from __future__ import annotations

from typing import Any

from corral.control.context import Context
from corral.control.cost import run_cost, stop_estimate
from corral.control.observe import Observation
from corral.control.transitions import Note, Step
from corral.control.watchers.base import Watcher, stop
from corral.pricing.forecast import forecast
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState


def _attempt(ctx: Context, run: RunRecord) -> tuple[float, str | None, dict[str, Any] | None]:
    """(price, provider, the agent's last status) of the run's current attempt."""
    if not run.attempt:
        return 0.0, None, None
    try:
        a = ctx.store.get_attempt(run.id, run.attempt)
    except Exception:
        return 0.0, None, None
    status = (a.data or {}).get("status")
    return float(a.price_per_hour or 0.0), a.provider, status if isinstance(status, dict) else None


#: the forecast acts once it passes the cap by this share (a forecast is an estimate)
FORECAST_MARGIN = 0.10


#: share added to the learned stop time: one stop takes a little longer than another
STOP_MARGIN = 0.25


class BudgetWatcher(Watcher):
    """``budget.max_cost_usd``: warns once at ``budget.warn_at`` (a ``budget.warning``
    event) and stops the run gracefully (reason ``budget``) when the cost, plus what the
    stop itself will cost, reaches the cap: the current price over the stop time learned for
    the attempt's provider (:func:`~corral.control.cost.stop_estimate`: a high percentile of
    its observed stops, request to confirmed teardown; ``Settings.budget_stop_estimate_s``
    until one is seen) with a margin of :data:`STOP_MARGIN`, plus the time until the next
    check (the longer of a tick and the last gap between two checks), so the final bill stays
    under the cap. The run is looked at again before the projection can reach the cap
    (``Observation.soon``), however quiet it is.

    Reset rules: none. The cost of a run only grows. The warning is given once per run: the
    controller's memory says so, and a restarted controller finds the event in the store.
    """

    name = "budget"
    states = frozenset(
        {RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING, RunState.PENDING}
    )

    @staticmethod
    def _reserve_s(ctx: Context, run: RunRecord, provider: str | None) -> float:
        """Seconds of the current price still to pay if the run is stopped at the next check
        rather than now: the stop itself and the wait for that check."""
        now = ctx.clock()
        notes = ctx.notes(run.id)
        last, notes.budget_checked_at = notes.budget_checked_at, now
        gap = (now - last).total_seconds() if last is not None else 0.0
        until_next = max(ctx.settings.tick_seconds, min(gap, 60.0))
        return stop_estimate(ctx, provider) * (1 + STOP_MARGIN) + until_next

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        cap = spec.budget.max_cost_usd
        if not cap:
            return None
        cost = run_cost(ctx, run.id)
        price, provider, status = _attempt(ctx, run)
        if run.state == RunState.PENDING:
            price = 0.0
        projected = cost + price * self._reserve_s(ctx, run, provider) / 3600.0
        data = {"cost_usd": round(cost, 6), "budget_usd": cap, "fraction": round(cost / cap, 4)}
        if projected >= cap:
            return stop(self.name, run, data)
        if price > 0:  # looked at again before the projection reaches the cap
            obs.soon((cap - projected) / price * 3600.0)
        notes = ctx.notes(run.id)
        ahead = self._forecast(ctx, run, spec, cost, price, status, data)
        if ahead is not None:
            return ahead
        if cost >= spec.budget.warn_at * cap and not notes.budget_warned:
            notes.budget_warned = True
            if not ctx.store.events(run.id, types=["budget.warning"], limit=1):
                return Note(
                    "budget.warning",
                    f"cost ${cost:.2f} is {cost / cap:.0%} of the ${cap:.2f} budget",
                    data=data,
                )
        return None

    @staticmethod
    def _forecast(
        ctx: Context,
        run: RunRecord,
        spec: JobSpec,
        cost: float,
        price: float,
        status: dict[str, Any] | None,
        data: dict[str, Any],
    ) -> Step | None:
        """``budget.on_forecast_over``: a stop, or a ``budget.forecast`` note once, when the
        run's forecast (:mod:`corral.pricing.forecast`) passes the cap by the margin."""
        cap, action = spec.budget.max_cost_usd, spec.budget.on_forecast_over
        if not cap or action == "ignore" or run.state != RunState.RUNNING:
            return None
        ahead = forecast(cost, price, status)
        if ahead is None or ahead.cost_usd <= cap * (1 + FORECAST_MARGIN):
            return None
        about = {
            **data,
            "forecast_cost_usd": round(ahead.cost_usd, 4),
            "finish_in_s": round(ahead.finish_in_s, 1),
            "progress": round(ahead.fraction, 4),
        }
        if action == "stop":
            return stop("budget", run, {**about, "by": "forecast"})
        notes = ctx.notes(run.id)
        if notes.budget_forecast_warned:
            return None
        notes.budget_forecast_warned = True
        if ctx.store.events(run.id, types=["budget.forecast"], limit=1):
            return None
        return Note(
            "budget.forecast",
            f"at {ahead.fraction:.0%} done, the run will cost about ${ahead.cost_usd:.2f}, "
            f"over its ${cap:.2f} budget",
            data=about,
        )
