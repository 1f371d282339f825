"""The budget watcher."""

from __future__ import annotations

from corral.control.context import Context
from corral.control.cost import run_cost
from corral.control.observe import Observation
from corral.control.transitions import Note, Step
from corral.control.watchers.base import Watcher, stop
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState


def current_price(ctx: Context, run: RunRecord) -> float:
    """$/hour of the run's current attempt (0 before the first or when unknown)."""
    if not run.attempt:
        return 0.0
    try:
        return float(ctx.store.get_attempt(run.id, run.attempt).price_per_hour or 0.0)
    except Exception:
        return 0.0


class BudgetWatcher(Watcher):
    """``budget.max_cost_usd``: warns once at ``budget.warn_at`` (a ``budget.warning``
    event) and stops the run gracefully (reason ``budget``) when the cost, plus what the
    graceful stop itself will cost (``Settings.budget_stop_estimate_s`` at the current
    price), reaches the cap.

    Reset rules: none. The cost of a run only grows. The warning is given once per run: the
    controller's memory says so, and a restarted controller finds the event in the store.
    """

    name = "budget"
    states = frozenset(
        {RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING, RunState.PENDING}
    )

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        cap = spec.budget.max_cost_usd
        if not cap:
            return None
        cost = run_cost(ctx, run.id)
        price = current_price(ctx, run) if run.state != RunState.PENDING else 0.0
        projected = cost + price * ctx.settings.budget_stop_estimate_s / 3600.0
        data = {"cost_usd": round(cost, 6), "budget_usd": cap, "fraction": round(cost / cap, 4)}
        if projected >= cap:
            return stop(self.name, run, data)
        warn_key = f"{run.id}:budget-warned"
        if cost >= spec.budget.warn_at * cap and not ctx.memo.get(warn_key):
            ctx.memo[warn_key] = True
            if not ctx.store.events(run.id, types=["budget.warning"], limit=1):
                return Note(
                    "budget.warning",
                    f"cost ${cost:.2f} is {cost / cap:.0%} of the ${cap:.2f} budget",
                    data=data,
                )
        return None
