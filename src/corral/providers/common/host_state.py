"""On-disk state of an agent host (:mod:`corral.providers.common.host`), under its root::

    <root>/lock                          fcntl.flock: every allocation decision holds it
    <root>/instances/<key>/instance.json InstanceRecord (written atomically)
    <root>/instances/<key>/plan.json     the AgentPlan the agent runs (mode 0600: it holds env)
    <root>/instances/<key>/agent.out     the agent's stdout and stderr
    <root>/instances/<key>/agent/        the agent's state dir (agent.json, children.json, logs)

A provider never imports the store: these files are its own truth, shared by every controller
and CLI on this machine.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.files import write_atomic
from corral.fslock import exclusive
from corral.providers.common.files import KEY_RE, check_key, read_json

INSTANCE_FILE = "instance.json"
PLAN_FILE = "plan.json"
AGENT_OUT = "agent.out"
AGENT_DIR = "agent"
AGENT_JSON = "agent.json"
CHILDREN_JSON = "children.json"


class InstanceRecord(BaseModel):
    """What ``instance.json`` holds for one launched instance."""

    model_config = ConfigDict(extra="forbid")

    key: str
    instance_id: str
    run_id: str
    attempt: int | None = None
    state: Literal["active", "preempted", "terminated"] = "active"
    pid: int | None = Field(None, description="Agent pid; None while the launch is in progress.")
    create_time: float | None = Field(None, description="The agent's psutil create_time.")
    pgid: int | None = None
    gpus: list[str] = Field(default_factory=list, description="Physical GPU ids held.")
    gpu_type: str | None = None
    created_at: datetime
    preempted_at: datetime | None = None
    terminated_at: datetime | None = None
    offer: dict[str, Any]
    launch_args: list[str] = Field(
        default_factory=list, description="More `corral agent` launch options of this machine."
    )

    @property
    def since(self) -> float:
        """Epoch seconds of creation: processes of this instance started at or after it."""
        return self.created_at.timestamp()


class Layout:
    """Paths of the local provider's files under ``home``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.instances = self.root / "instances"
        self.lock_path = self.root / "lock"

    def dir(self, key: str) -> Path:
        return self.instances / check_key(key)

    def agent_dir(self, key: str) -> Path:
        return self.dir(key) / AGENT_DIR

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive lock shared by every process on this machine using this home."""
        self.instances.mkdir(parents=True, exist_ok=True)
        return exclusive(self.lock_path)

    def read(self, key: str) -> InstanceRecord | None:
        data = read_json(self.dir(key) / INSTANCE_FILE)
        if data is None:
            return None
        try:
            return InstanceRecord.model_validate(data)
        except ValidationError:
            return None  # not ours or from an incompatible version: ignore it

    def write(self, rec: InstanceRecord) -> None:
        d = self.dir(rec.key)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(d / INSTANCE_FILE, rec.model_dump_json(indent=2), mode=0o644)

    def records(self) -> list[InstanceRecord]:
        if not self.instances.is_dir():
            return []
        out = []
        for d in sorted(self.instances.iterdir()):
            if d.is_dir() and KEY_RE.match(d.name):
                rec = self.read(d.name)
                if rec is not None:
                    out.append(rec)
        return out
