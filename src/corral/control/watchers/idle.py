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
from corral.errors import AgentError
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


#: a stage's CPU counts as work at 5 % of a core on average over the idle window: the timer
#: restarts each time its processes have used another ``CPU_SHARE x idle_timeout`` CPU seconds
CPU_SHARE = 0.05
#: and each time their resident memory moved by this much (loading, allocating)
RSS_STEP_MB = 256.0


def activity(status: AgentStatus, threshold: float, limit_s: float = 1800.0) -> Activity:
    """The running stages and their latest steps, how much CPU their processes have used and
    how much memory they hold (in steps: CPU seconds of ``CPU_SHARE x limit_s``, at least 0.5;
    ``RSS_STEP_MB``), and whether a GPU is busy (at or above ``threshold`` percent). A change
    of any of them is work."""
    running = status.running_stages()
    if not running:
        return Activity(False, ("none",), "no stage is running")
    cpu_step = max(0.5, CPU_SHARE * limit_s)
    marks = tuple(
        sorted(
            (
                s.name,
                s.step,
                None if s.cpu_s is None else int(s.cpu_s // cpu_step),
                None if s.rss_mb is None else int(s.rss_mb // RSS_STEP_MB),
            )
            for s in running
        )
    )
    gpus = status.gpus
    busy = any((g.utilization_pct or 0) >= threshold for g in gpus)
    reports = any(s.step is not None for s in running)
    machine = any(s.cpu_s is not None for s in running)
    if not gpus and not reports and not machine:
        # no GPU to watch, no progress reported, no process to measure: nothing to judge by
        return Activity(True, marks)
    what = ["no progress report"]
    if gpus:
        what.append(f"GPUs under {threshold:.0f}% utilisation")
    if machine:
        what.append(f"the stages' CPU under {CPU_SHARE:.0%} of a core and their memory steady")
    return Activity(
        busy, marks, ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else what[0]
    )


class IdleWatcher(Watcher):
    """``limits.idle_timeout``: stops the run gracefully (reason ``idle``) when no work was
    seen for that long in the agent's status as last copied onto the attempt.

    Reset rules: the timer restarts whenever a stage is running *and* there is a sign of work
    (a new progress report - a higher step -, a stage starting or ending, a GPU above
    ``Settings.idle_gpu_threshold_pct``, the stages' processes using CPU - 5 % of a core over
    the window - or moving their memory), and for each new attempt. An attempt outside its
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
        seen = activity(status, ctx.settings.idle_gpu_threshold_pct, limit)
        if mark is None or seen.busy or seen.token != mark.token:
            notes.idle = IdleMark(now, seen.token)
            return None
        idle_for = (now - mark.since).total_seconds()
        if idle_for >= limit:
            # the copy may be a quiet pull old (``control.bell``): ask the agent before stopping
            fresh = _fresh(obs, ctx.settings.idle_gpu_threshold_pct, limit)
            if fresh is not None and (fresh.busy or fresh.token != mark.token):
                notes.idle = IdleMark(now, fresh.token)
                return None
            return stop(self.name, run, {"idle_s": round(idle_for, 1), "why": seen.why})
        obs.soon(limit - idle_for)
        return None


def _fresh(obs: Observation, threshold: float, limit: float) -> Activity | None:
    """What the agent's status says now (None: it does not answer, or no stage runs: idle
    either way). An attempt no longer running is not stopped for idleness: its end is the
    handler's."""
    try:
        status = obs.status()
    except AgentError:
        return None
    if status.phase != Phase.RUNNING:
        return Activity(True, ("not running",))
    if not status.running_stages():
        return None
    return activity(status, threshold, limit)
