"""What a container provider remembers of its machines (``CORRAL_HOME/<provider>/machines.json``).

Container clouds without a preemption notice (SaladCloud, IO.net) show a moved replica as just
another instance: the only signs of a preemption are a replica back to allocating after it
ran, or one running on another machine (or as another container). The provider therefore
remembers, per resource, the machine it first ran on and whether corral itself stopped it.
The file is changed under an exclusive lock, so several controllers and CLIs on this machine
can share it; a lost file only delays the detection of a preemption to the agent's silence.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corral.files import write_atomic


class MachineMemory:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / "machines.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                write_atomic(self.path, json.dumps(data, sort_keys=True), mode=0o644)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, dict)}

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._read().get(name) or {})

    def first_machine(self, name: str) -> str | None:
        value = self.get(name).get("machine")
        return value if isinstance(value, str) and value else None

    def saw_running(self, name: str, machine_id: str) -> None:
        """Remember ``machine_id`` as the first machine of ``name`` (a later one is not kept)."""
        if self.first_machine(name):
            return
        with self._locked() as data:
            entry = data.setdefault(name, {})
            entry.setdefault("machine", machine_id or "?")

    def set_stopped(self, name: str, stopped: bool) -> None:
        with self._locked() as data:
            entry = data.setdefault(name, {})
            if stopped:
                entry["stopped"] = True
            else:
                entry.pop("stopped", None)
                entry.pop("machine", None)  # a started one is allocated afresh

    def stopped(self, name: str) -> bool:
        return bool(self.get(name).get("stopped"))

    def forget(self, name: str) -> None:
        if name in self._read():
            with self._locked() as data:
                data.pop(name, None)
