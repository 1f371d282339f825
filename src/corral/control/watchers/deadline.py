"""The deadline watcher."""

from __future__ import annotations

from corral.control.context import Context
from corral.control.observe import Observation
from corral.control.transitions import Step
from corral.control.watchers.base import Watcher, stop
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState


class DeadlineWatcher(Watcher):
    """``limits.max_runtime``: stops the run gracefully (reason ``deadline``) once that much
    wall time has passed since its first RUNNING.

    Reset rules: none. The time counts across attempts and recoveries (``runs.started_at``
    is set once, by the store).
    """

    name = "deadline"
    states = frozenset({RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING})

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        limit = spec.limits.max_runtime
        if not limit or run.started_at is None:
            return None
        ran = (ctx.clock() - run.started_at).total_seconds()
        if ran >= limit:
            return stop(self.name, run, {"runtime_s": round(ran, 1), "max_runtime_s": limit})
        obs.soon(limit - ran)  # looked at again when the time is up, whatever its pace
        return None
