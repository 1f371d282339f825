"""The agent's ``GET /status`` answer, typed: the attempt's phase, its stages, GPUs, the last
checkpoint, and the sections the node's hooks add (code, checkpoint sync, manifest, notices,
...), each a typed optional field left out of the JSON when the hook is not there.

The agent builds this model and serialises it; the controller validates it once per answer.
The producer is ours, so an unknown key is refused (``extra="forbid"``): a field added on one
side only is an error naming it, not a value silently kept or dropped. A node hook
(:mod:`corral.wire.node`) adds its section under one of the fields below.

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


#: what every model of the status is built with (built on first use: an agent starting its
#: stages needs none of them)
_STRICT = ConfigDict(extra="forbid", defer_build=True)


def _absent(value: object) -> bool:
    return value is None


class StageStatus(BaseModel):
    model_config = _STRICT

    name: str
    state: StageState
    gpus: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    pid: int | None = None
    #: the latest progress record of the stage (step, total, percent, loss, metrics...)
    progress: dict[str, Any] | None = None
    #: what the progress file holds that the agent could not read (left out when nothing)
    progress_unread: dict[str, Any] | None = Field(None, exclude_if=_absent)
    #: CPU seconds and resident MiB of the running stage's processes (its leader and every
    #: descendant): the idle watcher counts CPU and memory activity (left out otherwise)
    cpu_s: float | None = Field(None, exclude_if=_absent)
    rss_mb: float | None = Field(None, exclude_if=_absent)

    @property
    def step(self) -> Any:
        return (self.progress or {}).get("step")


class GpuUsage(BaseModel):
    model_config = _STRICT

    id: str
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None


class CodeStatus(BaseModel):
    """``code``: where the attempt's shipped code stands (``corral.agent.code``)."""

    model_config = _STRICT

    #: pending, waiting (for the controller's upload), ready or failed
    state: str
    #: where the code came from: upload, git, cache, storage (None: not known yet)
    source: str | None = None
    sha256: str | None = Field(None, exclude_if=_absent)
    size: int | None = Field(None, exclude_if=_absent)
    #: bytes of the bundle the agent holds (an upload resumes from here)
    received: int | None = Field(None, exclude_if=_absent)
    commit: str | None = Field(None, exclude_if=_absent)
    reason: str | None = Field(None, exclude_if=_absent)


class CheckpointSyncStatus(BaseModel):
    """``checkpoint_sync``: the SDK's checkpoints mirrored to storage."""

    model_config = _STRICT

    warning: str | None = None
    uri: str | None = None
    last_uploaded_step: int | None = None
    restored_step: int | None = None
    pending: int = 0
    uploading: str | None = None
    last_error: str | None = None


class CheckpointMirrorStatus(BaseModel):
    """``checkpoint_mirror``: the job's own checkpoint paths mirrored to storage."""

    model_config = _STRICT

    paths: list[str] = Field(default_factory=list)
    uri: str | None = None
    uploaded: int = 0
    last_uploaded: str | None = None
    restored: str | None = None
    last_error: str | None = None
    warning: str | None = None


class ServiceStatus(BaseModel):
    """One service stage in ``services``."""

    model_config = _STRICT

    stage: str
    ports: list[int]
    health: str | None = None
    healthy: bool | None = None
    public: bool = True
    running: bool = False
    #: the way in through the agent (``/services/<stage>/``)
    path: str


class AgentStatus(BaseModel):
    """``GET /status``."""

    model_config = _STRICT

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

    # --- the hooks' sections (left out of the JSON when the hook is not there) ------------
    code: CodeStatus | None = Field(None, exclude_if=_absent)
    checkpoint_sync: CheckpointSyncStatus | None = Field(None, exclude_if=_absent)
    checkpoint_mirror: CheckpointMirrorStatus | None = Field(None, exclude_if=_absent)
    #: the eval's acceptance verdict (criteria, all_pass) once the report was read
    acceptance: dict[str, Any] | None = Field(None, exclude_if=_absent)
    #: the run manifest's summary once it is written (uri, ...)
    manifest: dict[str, Any] | None = Field(None, exclude_if=_absent)
    services: list[ServiceStatus] | None = Field(None, exclude_if=_absent)
    #: a provider's preemption-notice poller (node hook): its own words
    notices: dict[str, Any] | None = Field(None, exclude_if=_absent)
    #: what the node is, as its provider's node hook says (provider, ids, probes, ...)
    node: dict[str, Any] | None = Field(None, exclude_if=_absent)

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


#: the keys a hook's ``status()`` may add to the answer (any other is left out by the runner)
HOOK_SECTIONS = frozenset(
    {"code", "checkpoint_sync", "checkpoint_mirror", "acceptance", "manifest", "notices", "node"}
)
