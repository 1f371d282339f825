"""The idle watcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from corral.control.context import Context
from corral.control.notes import IdleMark
from corral.control.observe import Observation
from corral.control.transitions import Step
from corral.control.watchers.base import Watcher, stop
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.wire.status import AgentStatus, Phase


@dataclass(frozen=True)
class Activity:
    """What counts as work in one agent status: ``busy`` resets the timer, and so does a
    change of ``token`` (the running stages and their latest steps)."""

    busy: bool
    token: tuple[Any, ...]
    why: str = ""


def activity(status: AgentStatus, threshold: float) -> Activity:
    """The running stages and their latest steps, and whether a GPU is busy (at or above
    ``threshold`` percent)."""
    running = status.running_stages()
    if not running:
        return Activity(False, ("none",), "no stage is running")
    steps = tuple(sorted(((s.name, s.step) for s in running), key=lambda t: t[0]))
    gpus = status.gpus
    busy = any((g.utilization_pct or 0) >= threshold for g in gpus)
    reports = any(step is not None for _, step in steps)
    if not gpus and not reports:
        # no GPU to watch and no progress reported: nothing to judge idleness by
        return Activity(True, steps)
    why = (
        f"no progress report and GPUs under {threshold:.0f}% utilisation"
        if gpus
        else "no progress report"
    )
    return Activity(busy, steps, why)


class IdleWatcher(Watcher):
    """``limits.idle_timeout``: stops the run gracefully (reason ``idle``) when no work was
    seen for that long in the agent's status as last copied onto the attempt.

    Reset rules: the timer restarts whenever a stage is running *and* there is a sign of work
    (a new progress report - a higher step -, a stage starting or ending, a GPU above
    ``Settings.idle_gpu_threshold_pct``), and for each new attempt. An attempt outside its
    ``running`` phase (setup, stopping, finishing) is never judged idle. With no stage
    running the run is idle. A job on a machine without GPUs that reports no progress is never
    called idle by the GPU rule (only by "no stage running"). The timer lives in the
    controller's memory: a restarted controller starts it again (a stop can only come later,
    never earlier).
    """

    name = "idle"

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        limit = spec.limits.idle_timeout
        if not limit or not run.attempt:
            return None
        cached = (ctx.store.get_attempt(run.id, run.attempt).data or {}).get("status")
        if not cached:
            return None
        try:
            status = AgentStatus.model_validate(cached)
        except ValidationError:  # stored by another corral release: the next look stores anew
            return None
        if status.phase != Phase.RUNNING:
            return None  # setup, finishing, stopping: not idle by definition
        notes = ctx.notes(run.id).attempt(run.attempt)
        now = ctx.clock()
        mark = notes.idle
        seen = activity(status, ctx.settings.idle_gpu_threshold_pct)
        if mark is None or seen.busy or seen.token != mark.token:
            notes.idle = IdleMark(now, seen.token)
            return None
        idle_for = (now - mark.since).total_seconds()
        if idle_for >= limit:
            return stop(self.name, run, {"idle_s": round(idle_for, 1), "why": seen.why})
        obs.soon(limit - idle_for)
        return None
