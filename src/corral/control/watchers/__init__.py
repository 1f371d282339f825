"""Watchers: small, independent checks the controller runs on every active run, each tick,
before the handler of the run's state (see ``base`` for the contract, each module for a
watcher's rules and resets).

The registry :data:`WATCHERS` is what the loop iterates, in order: the money and time limits
first, then the machine and the agent. A watcher that raises is logged and skipped: it never
stops the loop or the other watchers.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.control import transitions
from corral.control.context import Context, log
from corral.control.observe import Observation
from corral.control.transitions import Transition
from corral.control.watchers.base import Watcher
from corral.control.watchers.budget import BudgetWatcher
from corral.control.watchers.caps import CapsWatcher
from corral.control.watchers.deadline import DeadlineWatcher
from corral.control.watchers.gang import GangWatcher
from corral.control.watchers.health import HealthWatcher
from corral.control.watchers.idle import IdleWatcher
from corral.control.watchers.preemption import PreemptionWatcher
from corral.store.records import RunRecord
from corral.store.states import RunState

WATCHERS: tuple[Watcher, ...] = (
    BudgetWatcher(),
    CapsWatcher(),
    DeadlineWatcher(),
    IdleWatcher(),
    PreemptionWatcher(),
    GangWatcher(),
    HealthWatcher(),
)


def run_watchers(
    ctx: Context,
    run: RunRecord,
    obs: Observation,
    watchers: Sequence[Watcher] = WATCHERS,
) -> Transition | None:
    """Run every watcher that looks at the run's state. Notes and stop requests are applied
    at once and the next watcher runs; the first transition is returned (for the caller to
    apply) and the remaining watchers wait for the next tick."""
    spec = ctx.spec(run)
    state = RunState(run.state)
    for watcher in watchers:
        if state not in watcher.states:
            continue
        try:
            step = watcher.check(ctx, run, spec, obs)
            if isinstance(step, Transition):
                return step
            transitions.apply(ctx, run, step)
        except Exception as e:  # one watcher's failure never stops the others or the loop
            log.error("run %s: watcher %s failed: %s", run.id, watcher.name, e)
    return None


__all__ = [
    "WATCHERS",
    "BudgetWatcher",
    "CapsWatcher",
    "DeadlineWatcher",
    "HealthWatcher",
    "IdleWatcher",
    "PreemptionWatcher",
    "Watcher",
    "run_watchers",
]
