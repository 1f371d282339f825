"""Agent events: what the agent records (``GET /events?after=N``) and the controller copies
into the store. ``seq`` starts at 1 and is dense; ``ts`` is ISO 8601 UTC."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ATTEMPT_STARTED = "attempt.started"
SETUP_STARTED = "setup.started"
SETUP_FINISHED = "setup.finished"
STAGE_STARTED = "stage.started"
STAGE_WAITING = "stage.waiting"
STAGE_FINISHED = "stage.finished"
STAGE_SKIPPED = "stage.skipped"
PROGRESS = "progress"
CHECKPOINT_SAVED = "checkpoint.saved"
ATTEMPT_FINISHED = "attempt.finished"
STOP_REQUESTED = "stop.requested"
#: a hook failed (data: hook, message)
AGENT_ERROR = "agent.error"
#: a complete checkpoint is in object storage (data: step, uri)
CHECKPOINT_UPLOADED = "checkpoint.uploaded"
#: restored from object storage at attempt start (data: step, uri)
CHECKPOINT_RESTORED = "checkpoint.restored"
#: corrupt: not restored/uploaded (data: step, name, uri, reason)
CHECKPOINT_SKIPPED = "checkpoint.skipped"
#: storage is set but nothing at the checkpoint path was recognised (data: message, paths)
CHECKPOINT_WARNING = "checkpoint.warning"
#: data: uri, files, bytes
ARTIFACTS_UPLOADED = "artifacts.uploaded"
#: data: uri
MANIFEST_WRITTEN = "manifest.written"
#: data: criteria [{metric, op, value, observed, passed}], all_pass
EVAL_ACCEPTANCE = "eval.acceptance"
#: the machine learnt of its coming preemption (data: the provider's notice)
PREEMPTION_NOTICE = "preemption.notice"
#: the code is in place on the node (data: source, sha256, bytes, commit, seconds)
CODE_READY = "code.ready"
#: a mount was copied to the node (data: source, path, files, bytes, cached_files)
MOUNT_DOWNLOADED = "mount.downloaded"
#: a mount's changes went back to its source (data: source, path, files, bytes)
MOUNT_UPLOADED = "mount.uploaded"
#: what the node is (data: the provider's own words: provider, machine_id, instance_id, ...)
NODE_INFO = "node.info"

EVENT_TYPES = frozenset(
    {
        ATTEMPT_STARTED,
        SETUP_STARTED,
        SETUP_FINISHED,
        STAGE_STARTED,
        STAGE_WAITING,
        STAGE_FINISHED,
        STAGE_SKIPPED,
        PROGRESS,
        CHECKPOINT_SAVED,
        ATTEMPT_FINISHED,
        STOP_REQUESTED,
        AGENT_ERROR,
        CHECKPOINT_UPLOADED,
        CHECKPOINT_RESTORED,
        CHECKPOINT_SKIPPED,
        CHECKPOINT_WARNING,
        ARTIFACTS_UPLOADED,
        MANIFEST_WRITTEN,
        EVAL_ACCEPTANCE,
        PREEMPTION_NOTICE,
        CODE_READY,
        MOUNT_DOWNLOADED,
        MOUNT_UPLOADED,
        NODE_INFO,
    }
)


class AgentEvent(BaseModel):
    """One event as the agent records and serves it (what ``EventLog.emit`` writes). The
    producer is ours: an unknown key is refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    seq: int = Field(ge=1)
    ts: str
    type: str
    stage: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class EventsPage(BaseModel):
    """``GET /events?after=N``: the events after ``N`` and the cursor to ask with next."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    events: list[AgentEvent] = Field(default_factory=list)
    next: int = Field(0, ge=0)
