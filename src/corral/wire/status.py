"""The agent's ``GET /status`` answer, typed: the attempt's phase, its stages, GPUs, the last
checkpoint, and whatever the node's hooks add (notices, checkpoint sync, ...).

Phases of an attempt (the runner moves through them in this order)::

    setup -> running -> stopping -> finishing -> succeeded | failed | preempted | stopped

``finishing`` (hooks upload checkpoints and artifacts) is not terminal: the controller keeps
the machine until the agent reports a terminal phase.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Phase(enum.StrEnum):
    SETUP = "setup"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHING = "finishing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        """The attempt is over on the node: no stage runs and no hook is left to run."""
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.PREEMPTED, Phase.STOPPED})


class StageState(enum.StrEnum):
    PENDING = "pending"
    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    STOPPED = "stopped"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        """No more output will go to the stage's log."""
        return self in TERMINAL_STAGE_STATES

    @property
    def done(self) -> bool:
        """The stage's work is there for the stages that need it (or for a later attempt)."""
        return self in (StageState.SUCCEEDED, StageState.SKIPPED)


TERMINAL_STAGE_STATES = frozenset(
    {
        StageState.SUCCEEDED,
        StageState.FAILED,
        StageState.PREEMPTED,
        StageState.STOPPED,
        StageState.CANCELLED,
        StageState.SKIPPED,
    }
)


class StageStatus(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)

    name: str
    state: StageState
    gpus: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    pid: int | None = None
    #: the latest progress record of the stage (step, total, percent, loss, metrics...)
    progress: dict[str, Any] | None = None

    @property
    def step(self) -> Any:
        return (self.progress or {}).get("step")


class GpuUsage(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)

    id: str
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None


class AgentStatus(BaseModel):
    """``GET /status``. Hook keys (``notices``, ``checkpoint_sync``, ...) are kept as extras."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    wire_version: int | None = None
    run_id: str
    attempt: int
    phase: Phase
    started_at: str | None = None
    finished_at: str | None = None
    failed_stage: str | None = None
    exit_code: int | None = None
    reason: str = ""
    #: why a stop was asked for, when the attempt was stopped (see corral.wire.outcome.StopCause)
    stop_cause: str | None = None
    stages: list[StageStatus] = Field(default_factory=list)
    gpus: list[GpuUsage] = Field(default_factory=list)
    last_checkpoint: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.phase.terminal

    def running_stages(self) -> list[StageStatus]:
        return [s for s in self.stages if s.state == StageState.RUNNING]

    def succeeded_stages(self) -> list[str]:
        return [s.name for s in self.stages if s.state == StageState.SUCCEEDED]

    def as_dict(self) -> dict[str, Any]:
        """The JSON form kept with the attempt and shown by ``corral status``."""
        return self.model_dump(mode="json")
