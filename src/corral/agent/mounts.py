"""``mounts:`` on the node: copy object-storage prefixes to directories before the stages, and
upload them back on a schedule and at the end.

Download: one listing of the prefix; with ``cache`` each object is kept on the node's disk
(``<cache>/<digest of the source>/``, with an index of size and ETag), so a later attempt on
the same machine downloads only what changed; the directory gets a copy (the job may change it
without touching the cache). Upload: the files of the directory whose size or modification
time changed since the download (or the last upload) go back under the same keys.
``mount.downloaded`` and ``mount.uploaded`` events say how much moved. Credentials come from
the agent's environment, as for checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corral.bundle.remote import get_file, open_storage, put_file, remote_files
from corral.errors import BadInput, CorralError
from corral.files import write_json_atomic
from corral.wire.code import MountPlan
from corral.wire.node import EventSink, NodeRunner

INDEX = ".corral-mount.json"


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and ".." not in parts and "" not in parts


class MountSet:
    """The mounts of one attempt. A node hook too (``mounts``): uploads while the stages run
    and after them."""

    name = "mounts"

    def __init__(
        self,
        mounts: list[MountPlan],
        node_path: Callable[[str], str],
        cache: Path,
        env: Mapping[str, str],
        events: EventSink,
    ):
        self.mounts = list(mounts)
        self._node_path = node_path
        self._cache = cache
        self._env = dict(env)
        self._events = events
        #: mount index -> {relative path: (size, mtime_ns)} as last downloaded or uploaded
        self._seen: dict[int, dict[str, tuple[int, int]]] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.problem: str | None = None

    @property
    def uploads(self) -> bool:
        return any(m.upload_every_s or m.upload_at_end for m in self.mounts)

    # --- download ---------------------------------------------------------------------------

    def download(self) -> None:
        for i, m in enumerate(self.mounts):
            self._download(i, m)

    def _download(self, i: int, m: MountPlan) -> None:
        try:
            storage, base = open_storage(m.source, self._env)
            files = remote_files(storage, base)
        except (CorralError, OSError) as exc:
            why = exc.message if isinstance(exc, CorralError) else str(exc)
            raise BadInput(f"mount {m.source}: {why}") from None
        target = Path(self._node_path(m.path))
        target.mkdir(parents=True, exist_ok=True)
        moved = cached = 0
        cdir = self._cache / hashlib.sha256(m.source.encode()).hexdigest()[:24]
        index: dict[str, list[Any]] = {}
        if m.cache:
            try:
                index = json.loads((cdir / INDEX).read_text())
            except (OSError, ValueError):
                index = {}
        for rel, size, tag in files:
            if not _safe(rel):
                continue
            remote = storage.join(base, rel)
            try:
                if m.cache:
                    local = cdir / rel
                    if index.get(rel) == [size, tag] and _size(local) == size:
                        cached += 1
                    else:
                        moved += get_file(storage, remote, local)
                        index[rel] = [size, tag]
                    (target / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(local, target / rel)
                else:
                    moved += get_file(storage, remote, target / rel)
            except (CorralError, OSError) as exc:
                why = exc.message if isinstance(exc, CorralError) else str(exc)
                raise BadInput(f"mount {m.source}: {rel}: {why}") from None
        if m.cache:
            cdir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(cdir / INDEX, index, fsync=False)
        self._seen[i] = _scan(target)
        self._events.emit(
            "mount.downloaded",
            data={
                "source": m.source,
                "path": m.path,
                "files": len(files),
                "bytes": moved,
                "cached_files": cached,
            },
        )

    # --- upload -----------------------------------------------------------------------------

    def upload(self, i: int) -> int:
        """Upload what changed in mount ``i``'s directory. Returns the files uploaded."""
        m = self.mounts[i]
        with self._lock:
            storage, base = open_storage(m.source, self._env)
            target = Path(self._node_path(m.path))
            now = _scan(target)
            seen = self._seen.get(i, {})
            changed = [rel for rel, sig in now.items() if seen.get(rel) != sig]
            sent = 0
            for rel in changed:
                sent += put_file(storage, target / rel, storage.join(base, rel))
            self._seen[i] = now
        if changed:
            self._events.emit(
                "mount.uploaded",
                data={"source": m.source, "path": m.path, "files": len(changed), "bytes": sent},
            )
        return len(changed)

    def _every(self, i: int, seconds: float) -> None:
        while not self._stop.wait(seconds):
            try:
                self.upload(i)
            except (CorralError, OSError) as exc:
                why = exc.message if isinstance(exc, CorralError) else str(exc)
                self._events.emit("agent.error", data={"hook": self.name, "message": why})

    # --- the hook ---------------------------------------------------------------------------

    def before_stages(self, runner: NodeRunner) -> str | None:
        for i, m in enumerate(self.mounts):
            if m.upload_every_s:
                t = threading.Thread(
                    target=self._every, args=(i, m.upload_every_s), daemon=True, name=f"mount-{i}"
                )
                t.start()
                self._threads.append(t)
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        for i, m in enumerate(self.mounts):
            if not (m.upload_at_end or m.upload_every_s) or i not in self._seen:
                continue
            try:
                self.upload(i)
            except (CorralError, OSError) as exc:
                why = exc.message if isinstance(exc, CorralError) else str(exc)
                return f"mount {m.source}: upload failed: {why}"
        return None

    def status(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self._stop.set()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _scan(root: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            if name.endswith(".part") and name.startswith("."):
                continue
            path = os.path.join(top, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out
