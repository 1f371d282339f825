"""Put the plan's code in place before the setup runs (``plan.code``, see
:mod:`corral.wire.code`), on a node that does not share the controller's files.

In order: clone ``git`` at its commit into the workdir; get the bundle (fetched from object
storage when the plan names it there, else - or when that fails - waiting for the controller
to upload it through ``PUT /code/<sha256>``), verified by its sha256 as it arrives; unpack it
into the workdir; apply its ``git.diff``; put the ``files`` where they go; copy the ``mounts``
in. ``GET /status`` shows where it stands (``code``); ``code.ready`` is the event of its end.
A failure fails the attempt before any setup command runs, with a one-line reason.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corral.agent.mounts import MountSet
from corral.bundle import git as gitsrc
from corral.bundle.remote import storage_env
from corral.bundle.unpack import Mismatch, Receiver, extract
from corral.errors import CorralError
from corral.wire.code import CodePlan
from corral.wire.node import EventSink

#: how often the waiting loop looks at the upload and at a stop request
POLL_S = 0.1


class CodeStage:
    """The code of one attempt: its state, the upload it receives, and :meth:`prepare`."""

    def __init__(
        self,
        code: CodePlan,
        events: EventSink,
        *,
        workdir: str,
        state_dir: str | Path,
        node_path: Callable[[str], str],
        environ: Mapping[str, str],
        plan_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.code = code
        self.workdir = workdir
        self._events = events
        self._node_path = node_path
        self._env = storage_env(environ, plan_env or {})
        self._clock = clock
        self._dir = Path(state_dir) / "code"
        self._lock = threading.Lock()
        self.state = "pending"
        self.reason = ""
        self.source: str | None = None
        bundle = code.bundle
        self.receiver = Receiver(self._dir, bundle.sha256, bundle.size) if bundle else None
        cache = Path(state_dir).resolve().parent / "cache"
        self.mounts = MountSet(code.mounts, node_path, cache / "mounts", self._env, events)

    # --- status and upload (HTTP threads) ---------------------------------------------------

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "source": self.source}
        if self.receiver is not None:
            out.update(
                sha256=self.receiver.sha256,
                size=self.receiver.size,
                received=self.receiver.size if self.receiver.complete else self.receiver.received,
            )
        if self.code.git is not None:
            out["commit"] = self.code.git.commit
        if self.reason:
            out["reason"] = self.reason
        return out

    def receive(self, sha256: str, offset: int, chunks: Callable[[], bytes]) -> dict[str, Any]:
        """``PUT /code/<sha256>?offset=N``: bytes of the bundle. :class:`LookupError` for a
        bundle this attempt does not want; :class:`~corral.errors.BadInput` for an offset
        that is not where the bytes received end (the answer's ``received`` says where)."""
        if self.receiver is None or sha256 != self.receiver.sha256:
            raise LookupError(f"this attempt does not take bundle {sha256[:12]}")
        with self._lock:
            if self.source is None:
                self.source = "upload"
        received = self.receiver.write(offset, chunks)
        return {"sha256": sha256, "size": self.receiver.size, "received": received}

    # --- preparing (the runner's thread) ----------------------------------------------------

    def _set(self, state: str) -> None:
        self.state = state

    def prepare(self, stopping: Callable[[], bool]) -> str | None:
        """Everything in place: None; else why not (the attempt fails with it). Returns at
        once (None) when ``stopping()`` turns true while it waits for the bundle."""
        began = self._clock()
        try:
            problem = self._prepare(stopping)
        except CorralError as exc:
            problem = exc.message
        except OSError as exc:
            problem = f"cannot put the code in place: {exc}"
        if problem:
            self.state, self.reason = "failed", problem
            return problem
        if stopping() and self.state != "ready":
            return None
        self._set("ready")
        data: dict[str, Any] = {"seconds": round(self._clock() - began, 3), "source": self.source}
        if self.receiver is not None:
            data.update(sha256=self.receiver.sha256, bytes=self.receiver.size)
        if self.code.git is not None:
            data["commit"] = self.code.git.commit
        if self.code.files:
            data["files"] = len(self.code.files)
        self._events.emit("code.ready", data=data)
        return None

    def _prepare(self, stopping: Callable[[], bool]) -> str | None:
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        if self.code.git is not None:
            self._set("cloning")
            g = self.code.git
            token = self._env.get(g.token_env) if g.token_env else None
            gitsrc.checkout(g.url, g.commit, self.workdir, token=token)
            self.source = self.source or "git"
        diff: bytes | None = None
        files: dict[str, Path] = {}
        if self.receiver is not None:
            problem = self._obtain(stopping)
            if problem or not self.receiver.complete:
                return problem
            self._set("unpacking")
            target = self.workdir if self.code.bundle and self.code.bundle.workdir else None
            unpacked = extract(
                self.receiver.final, target or self._dir / "unused", self._dir / "files"
            )
            diff, files = unpacked.diff, unpacked.files
        if diff:
            self._set("patching")
            gitsrc.apply_diff(self.workdir, diff)
        for drop in self.code.files:
            src = files.get(drop.member)
            if src is None:
                return f"files: {drop.path} is missing from the code bundle"
            dst = Path(self._node_path(drop.path))
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            os.chmod(dst, stat.S_IMODE(drop.mode))
        if self.code.mounts:
            self._set("mounting")
            self.mounts.download()
        return None

    def _obtain(self, stopping: Callable[[], bool]) -> str | None:
        """The bundle, verified: from storage when it is there, else through an upload."""
        receiver = self.receiver
        assert receiver is not None and self.code.bundle is not None
        uri = self.code.bundle.storage
        if receiver.complete:
            self.source = self.source or "cache"
            return None
        if self.code.bundle.inline is not None:  # carried in the plan: here already
            data = base64.b64decode(self.code.bundle.inline)
            pieces = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
            receiver.reset()
            try:
                receiver.write(0, lambda: pieces.pop(0) if pieces else b"")
            except Mismatch:
                return "the code bundle in the plan does not match its sha256"
            if receiver.complete:
                self.source = "plan"
                return None
        if uri:
            self._set("fetching")
            try:
                self._fetch(uri)
                self.source = "storage"
                return None
            except (CorralError, OSError) as exc:
                why = exc.message if isinstance(exc, CorralError) else str(exc)
                self._events.emit(
                    "agent.error",
                    data={
                        "hook": "code",
                        "message": f"code from {uri}: {why}; waiting for an "
                        "upload from the controller",
                    },
                )
        self._set("waiting")
        deadline = self._clock() + self.code.wait_s
        while not receiver.complete:
            if stopping():
                return None
            if self._clock() >= deadline:
                return (
                    f"the code bundle never arrived ({receiver.received} of {receiver.size} "
                    f"bytes in {self.code.wait_s:.0f}s)"
                )
            time.sleep(POLL_S)
        return None

    def _fetch(self, uri: str) -> None:
        from corral.sdk.storage import resolve_location  # lazy: the storage clients are heavy

        receiver = self.receiver
        assert receiver is not None
        options = {"environ": self._env} if uri.startswith("s3://") else {}
        storage, path = resolve_location(uri, **options)
        receiver.reset()
        with storage.open_read(path) as f:
            try:
                receiver.write(0, lambda: f.read(1024 * 1024))
            except Mismatch:
                raise
        if not receiver.complete:
            raise OSError(f"{receiver.received} of {receiver.size} bytes")
