"""Pods corral itself stopped (``CORRAL_HOME/runpod/stopped.json``).

RunPod shows a stopped pod as ``EXITED`` whoever stopped it. An interrupted spot pod looks
the same, so the provider remembers the pods it stopped on purpose: EXITED and in this list
is STOPPED; EXITED and not in it is PREEMPTED (spot) or FAILED (on-demand). The file is
changed under an exclusive lock, so several controllers and CLIs can share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

from corral.files import write_atomic


class StoppedMarks:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / "stopped.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[set[str]]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ids = self._read()
            before = set(ids)
            yield ids
            if ids != before:
                write_atomic(self.path, json.dumps(sorted(ids)), mode=0o644)

    def _read(self) -> set[str]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return set()
        return {x for x in data if isinstance(x, str)} if isinstance(data, list) else set()

    def add(self, pod_id: str) -> None:
        with self._locked() as ids:
            ids.add(pod_id)

    def discard(self, pod_id: str) -> None:
        if pod_id in self._read():
            with self._locked() as ids:
                ids.discard(pod_id)

    def __contains__(self, pod_id: object) -> bool:
        return pod_id in self._read()
