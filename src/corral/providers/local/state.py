"""On-disk state of the local provider, under ``<CORRAL_HOME>/local/``.

::

    local/lock                          fcntl.flock: every allocation decision holds it
    local/instances/<key>/instance.json InstanceRecord (written atomically)
    local/instances/<key>/plan.json     the AgentPlan the agent runs (mode 0600: it holds env)
    local/instances/<key>/agent.out     the agent's stdout and stderr
    local/instances/<key>/agent/        the agent's state_dir (agent.json, children.json, logs)

The provider never imports the store: these files are the local provider's own truth, shared
by every controller and CLI on this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.errors import BadInput
from corral.fslock import exclusive

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

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

    @property
    def since(self) -> float:
        """Epoch seconds of creation: processes of this instance started at or after it."""
        return self.created_at.timestamp()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise BadInput(
            f"bad instance key {key!r}: use letters, digits, '.', '_' and '-' (at most 128)"
        )
    return key


def utcnow() -> datetime:
    return datetime.now(UTC)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` so readers see the old or the new content, never a mix."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if it is missing or not (yet) valid JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None


class Layout:
    """Paths of the local provider's files under ``home``."""

    def __init__(self, home: Path):
        self.root = Path(home) / "local"
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
        write_atomic(d / INSTANCE_FILE, rec.model_dump_json(indent=2))

    def records(self) -> list[InstanceRecord]:
        if not self.instances.is_dir():
            return []
        out = []
        for d in sorted(self.instances.iterdir()):
            if d.is_dir() and _KEY_RE.match(d.name):
                rec = self.read(d.name)
                if rec is not None:
                    out.append(rec)
        return out
