"""How ``corral pool scale`` and ``corral pool restart`` talk to the ``corral worker`` of this
box: two small JSON files in the workers' home (``--home``, default ``CORRAL_HOME/worker``).

- ``supervisor.json``, written by ``corral worker`` whenever something changes: its pid, its
  pool, each of its workers (name, GPUs, whether it should run, the pid running it) and the
  requests it has applied and finished.
- ``control.json``, written by the verbs: the latest request (an id, and either the number of
  workers wanted or the workers to restart). ``corral worker`` looks at it a few times a
  second and applies each id once.

Both are replaced whole (a temporary file renamed over the old one), so a reader never sees
half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corral import paths

STATE = "supervisor.json"
CONTROL = "control.json"


@dataclass
class SlotState:
    """One worker of the box as its supervisor keeps it."""

    name: str
    gpus: list[str]
    gpu_type: str
    #: it should be running (False: scaled down)
    active: bool = True
    #: the process serving it now (None: not running)
    pid: int | None = None


@dataclass
class SupervisorState:
    pid: int
    pool: str
    workers: list[SlotState]
    #: request ids applied (a scale's workers started or asked to stop)
    applied: list[str] = field(default_factory=list)
    #: request ids finished (a rolling restart done)
    finished: list[str] = field(default_factory=list)
    #: the worker a rolling restart is at, and those left
    restarting: str | None = None
    restart_left: list[str] = field(default_factory=list)
    #: a request refused by the supervisor: id -> why
    refused: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SupervisorState:
        fields = dict(data)
        fields["workers"] = [SlotState(**w) for w in data.get("workers", [])]
        return cls(**fields)


@dataclass(frozen=True)
class Request:
    id: str
    #: scale: how many workers should run
    workers: int | None = None
    #: restart: these workers, one at a time (empty: every running one)
    restart: tuple[str, ...] | None = None

    @classmethod
    def scale(cls, count: int) -> Request:
        return cls(id=uuid.uuid4().hex[:12], workers=count)

    @classmethod
    def rolling(cls, names: list[str]) -> Request:
        return cls(id=uuid.uuid4().hex[:12], restart=tuple(names))


def worker_home(home: Path | None = None) -> Path:
    """The home of this box's workers (``--home``, default ``CORRAL_HOME/worker``)."""
    return home or paths.home() / "worker"


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_state(home: Path, state: SupervisorState) -> None:
    home.mkdir(parents=True, exist_ok=True)
    _replace(home / STATE, state.to_json())


def read_state(home: Path) -> SupervisorState | None:
    """The box's supervisor as it last wrote itself, or None (none here, or it is gone)."""
    try:
        state = SupervisorState.from_dict(json.loads((home / STATE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return None  # it died without cleaning up
    except PermissionError:
        pass  # alive, another user's
    return state


def clear_state(home: Path) -> None:
    for name in (STATE, CONTROL):
        with contextlib.suppress(OSError):
            (home / name).unlink()


def send(home: Path, request: Request) -> None:
    data: dict[str, object] = {"id": request.id, "workers": request.workers}
    if request.restart is not None:
        data["restart"] = list(request.restart)
    _replace(home / CONTROL, json.dumps(data))


class Inbox:
    """The supervisor's side: the latest request, once per id."""

    def __init__(self, home: Path):
        self.path = home / CONTROL
        self.seen: set[str] = set()
        self.mtime = 0.0
        with contextlib.suppress(OSError):  # a request left from before this start: ignored
            self.seen.add(str(json.loads(self.path.read_text()).get("id")))
            self.mtime = self.path.stat().st_mtime

    def take(self) -> Request | None:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return None
        if mtime == self.mtime:
            return None
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # being replaced: next look
        self.mtime = mtime
        rid = str(data.get("id") or "")
        if not rid or rid in self.seen:
            return None
        self.seen.add(rid)
        restart = data.get("restart")
        workers = data.get("workers")
        return Request(
            id=rid,
            workers=int(workers) if isinstance(workers, int) else None,
            restart=tuple(str(n) for n in restart) if isinstance(restart, list) else None,
        )
