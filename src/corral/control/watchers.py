"""Watchers: small, independent checks the controller runs on every active run.

Each watcher looks at one run and may return an :class:`Action`: an event to record (once) or
a graceful stop with a reason. A watcher that raises is logged and skipped; it never stops the
loop or the other watchers. Health and preemption are watched by ``monitor`` (they need the
agent and the provider); the watchers here need only the store and the clock.

Reset rules, per watcher:

* **budget** never resets: the cost of a run only grows. It warns once at ``budget.warn_at``
  (a ``budget.warning`` event) and stops the run (reason ``budget``) when the cost, plus what
  the graceful stop itself will cost (``Settings.budget_stop_estimate_s`` at the current price),
  reaches ``budget.max_cost_usd``.
* **deadline** never resets: ``limits.max_runtime`` counts wall time from the run's first
  RUNNING, across attempts and recoveries (reason ``deadline``).
* **idle** (``limits.idle_timeout``) resets whenever a stage is running *and* there is a sign of
  work: a new progress report (a higher step), a stage starting, or a GPU above
  ``Settings.idle_gpu_threshold_pct``. With no stage running (all done or waiting) the run is
  idle. A job on a machine without GPUs that reports no progress is never called idle by the
  GPU rule (only by "no stage running"). The timer lives in the controller's memory: a restarted
  controller starts it again (it can only make a stop later, never earlier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from corral.control.context import Context
from corral.store.states import RunState
from corral.wire.outcome import StopCause


@dataclass(frozen=True)
class Action:
    kind: str  # "event" or "stop"
    reason: str
    event_type: str = ""
    data: dict[str, Any] | None = None


class Watcher:
    name: ClassVar[str]
    states: ClassVar[frozenset[str]] = frozenset({RunState.RUNNING})

    def check(self, ctx: Context, run: Any, spec: Any) -> Action | None:  # pragma: no cover
        raise NotImplementedError


def _current_price(ctx: Context, run: Any) -> float:
    if not run.attempt:
        return 0.0
    try:
        return float(ctx.store.get_attempt(run.id, run.attempt).price_per_hour or 0.0)
    except Exception:
        return 0.0


class BudgetWatcher(Watcher):
    name = "budget"
    states = frozenset(
        {RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING, RunState.PENDING}
    )

    def check(self, ctx: Context, run: Any, spec: Any) -> Action | None:
        cap = spec.budget.max_cost_usd
        if not cap:
            return None
        from corral.control.finishing import run_cost

        cost = run_cost(ctx, run.id)
        price = _current_price(ctx, run) if run.state != RunState.PENDING else 0.0
        projected = cost + price * ctx.settings.budget_stop_estimate_s / 3600.0
        data = {"cost_usd": round(cost, 6), "budget_usd": cap, "fraction": round(cost / cap, 4)}
        if projected >= cap:
            return Action("stop", "budget", data=data)
        warn_key = f"{run.id}:budget-warned"
        if cost >= spec.budget.warn_at * cap and not ctx.memo.get(warn_key):
            ctx.memo[warn_key] = True
            if not ctx.store.events(run.id, types=["budget.warning"], limit=1):
                return Action(
                    "event",
                    f"cost ${cost:.2f} is {cost / cap:.0%} of the ${cap:.2f} budget",
                    event_type="budget.warning",
                    data=data,
                )
        return None


class DeadlineWatcher(Watcher):
    name = "deadline"
    states = frozenset({RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING})

    def check(self, ctx: Context, run: Any, spec: Any) -> Action | None:
        limit = spec.limits.max_runtime
        if not limit or run.started_at is None:
            return None
        ran = (ctx.clock() - run.started_at).total_seconds()
        if ran >= limit:
            return Action(
                "stop", "deadline", data={"runtime_s": round(ran, 1), "max_runtime_s": limit}
            )
        return None


class IdleWatcher(Watcher):
    name = "idle"

    def check(self, ctx: Context, run: Any, spec: Any) -> Action | None:
        limit = spec.limits.idle_timeout
        if not limit or not run.attempt:
            return None
        attempt = ctx.store.get_attempt(run.id, run.attempt)
        status = (attempt.data or {}).get("status") or {}
        if not status or status.get("phase") not in ("running",):
            return None  # setup, finishing, stopping: not idle by definition
        key = f"{run.id}:{run.attempt}:idle"
        now = ctx.clock()
        mark = ctx.memo.get(key)
        signature = _activity(status, ctx.settings.idle_gpu_threshold_pct)
        if mark is None or signature["busy"] or signature["token"] != mark["token"]:
            ctx.memo[key] = {"since": now, "token": signature["token"]}
            return None
        idle_for = (now - mark["since"]).total_seconds()
        if idle_for >= limit:
            return Action(
                "stop", "idle", data={"idle_s": round(idle_for, 1), "why": signature["why"]}
            )
        return None


def _activity(status: dict[str, Any], threshold: float) -> dict[str, Any]:
    """What counts as work: the running stages and their latest steps (a change resets the
    timer), and busy GPUs."""
    running = [s for s in status.get("stages", []) if s.get("state") == "running"]
    if not running:
        return {"busy": False, "token": ("none",), "why": "no stage is running"}
    steps = tuple(sorted((s["name"], (s.get("progress") or {}).get("step")) for s in running))
    gpus = status.get("gpus") or []
    busy = any((g.get("utilization_pct") or 0) >= threshold for g in gpus)
    reports = any(step is not None for _, step in steps)
    if not gpus and not reports:
        # no GPU to watch and no progress reported: nothing to judge idleness by
        return {"busy": True, "token": steps, "why": ""}
    return {
        "busy": busy,
        "token": steps,
        "why": f"no progress report and GPUs under {threshold:.0f}% utilisation"
        if gpus
        else "no progress report",
    }


WATCHERS: tuple[Watcher, ...] = (BudgetWatcher(), DeadlineWatcher(), IdleWatcher())


def run_watchers(ctx: Context, run: Any) -> bool:
    """Run every watcher that applies to the run's state; True if the run was stopped."""
    from corral.control import finishing
    from corral.control.context import log

    spec = ctx.spec(run)
    for watcher in WATCHERS:
        if run.state not in watcher.states:
            continue
        try:
            action = watcher.check(ctx, run, spec)
        except Exception as e:  # one watcher's failure never stops the others or the loop
            log.error("run %s: watcher %s failed: %s", run.id, watcher.name, e)
            continue
        if action is None:
            continue
        if action.kind == "event":
            ctx.store.add_event(
                run.id,
                action.event_type,
                action.reason,
                data=action.data,
                attempt=run.attempt or None,
            )
            continue
        ctx.store.add_event(
            run.id,
            f"{watcher.name}.stop",
            f"stopping: {action.reason}",
            data=action.data,
            attempt=run.attempt or None,
        )
        finishing.begin_finish(
            ctx,
            run,
            RunState.STOPPED,
            action.reason,
            graceful=run.state == RunState.RUNNING,
            cause=StopCause.parse(watcher.name),
        )
        return True
    return False
