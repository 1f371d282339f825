"""Attempt hooks: work the agent does around the stages, besides running them.

A hook is called by the runner at fixed points of an attempt:

* ``before_stages(runner)`` after setup, before the first stage starts (e.g. restore the newest
  checkpoint from object storage). Return a reason (str) to fail the attempt, or None.
* ``after_stages(runner, phase)`` once every stage is down and before the attempt is reported
  finished (e.g. flush checkpoint uploads, upload artifacts, write the manifest). The agent's
  phase reads ``finishing`` meanwhile, so the controller does not tear the machine down early.
  Return a reason (str) to turn a succeeded attempt into a failed one, or None.
* ``status()`` extra keys merged into ``GET /status``.
* ``close()`` when the agent shuts down.

A hook never raises into the runner: an exception is logged as an ``agent.error`` event and
treated as a failure reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from corral.agent.events import EventLog
    from corral.agent.runner import Runner
    from corral.wire.plan import AgentPlan


class AttemptHook(Protocol):
    name: str

    def before_stages(self, runner: Runner) -> str | None: ...

    def after_stages(self, runner: Runner, phase: str) -> str | None: ...

    def status(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def build_hooks(plan: AgentPlan, events: EventLog) -> list[AttemptHook]:
    """The hooks a plan asks for (imported only when asked for, to keep start-up fast)."""
    hooks: list[AttemptHook] = []
    if plan.notice_poller:  # first: it polls from agent start-up, setup included
        from corral.agent.notices import build_notice_hook

        hooks.append(build_notice_hook(plan, events))
    if plan.checkpoint_storage:
        from corral.agent.checkpoint_sync import CheckpointSync

        hooks.append(CheckpointSync(plan, events))
    # always: every attempt ends with a manifest (stage timings, cost, git commit), even when
    # there are no artifacts to upload
    from corral.agent.artifacts import ArtifactsHook

    hooks.append(ArtifactsHook(plan, events))
    return hooks
