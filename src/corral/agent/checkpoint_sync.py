"""The checkpoint sync hook: mirror the job's checkpoints to ``plan.checkpoint_storage``.

Remote layout: ``<checkpoint_storage>/<run_id>/<prefix>-<step>/`` (the run id is stable across
attempts), each checkpoint with its files and its ``COMPLETE`` manifest, uploaded last.

* ``before_stages``: for each series (``ckpt``, ``ema``, ...) the newest remote checkpoint that
  is newer than the newest complete one in ``plan.checkpoint_dir`` is downloaded into
  ``<name>.tmp/``, every file checked against the manifest's size and sha256, then renamed into
  place (``checkpoint.restored``). A corrupt or incomplete remote checkpoint is skipped
  (``checkpoint.skipped``, left in place and never counted by retention) and the previous one
  tried. A storage error (missing bucket, access denied) fails the attempt before any stage
  runs, with a one-line reason: better than training for hours without a place to save.
* while the stages run, a thread polls the local directory every ``poll_seconds`` and uploads
  each new complete checkpoint, one at a time, newest first, skipping those the retention
  policy would delete anyway (``checkpoint.uploaded``); then applies the job's retention
  (the plan's ``checkpoint_policy``) to the remote copies. A failed upload is
  retried with backoff (1 s doubling to 60 s); each new error is an ``agent.error`` event.
* ``after_stages``: when the attempt was stopped or preempted, waits at most
  ``plan.grace_seconds`` for the newest complete checkpoint of each series to be uploaded;
  otherwise waits, as long as it takes, until every checkpoint the retention keeps is uploaded
  (``status()`` shows what is pending meanwhile). Failed tries are retried at once, then every
  1-4 s. Returns a failure reason when the newest could not be uploaded (a permanent error
  such as a missing bucket, or ``final_attempts`` failed tries) or the grace period ran out.

Credentials come from the agent's environment only (the storage's standard credential
variables); the endpoint and region may also come from the plan env (they are not secret). No event, status or reason
holds a credential value.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from corral.agent import mirror
from corral.errors import CorralError
from corral.sdk.manifest import CheckpointError
from corral.sdk.storage import LocalStorage, Storage, resolve_location
from corral.storage.errors import StorageError
from corral.storage.s3_client import CREDENTIAL_VARS, ENDPOINT_VARS, REGION_VARS, redact
from corral.wire.node import EventSink, NodeRunner
from corral.wire.plan import AgentPlan

MAX_BACKOFF_S = 60.0
FINAL_MAX_BACKOFF_S = 4.0


class CheckpointSync:
    name = "checkpoint_sync"

    def __init__(
        self,
        plan: AgentPlan,
        events: EventSink,
        *,
        storage: Storage | None = None,
        environ: Mapping[str, str] | None = None,
        poll_seconds: float = 1.0,
        final_attempts: int = 3,
        clock: Callable[[], float] = time.monotonic,
        checkpoint_dir: str | None = None,
    ):
        self.plan = plan
        self._events = events
        self._poll = poll_seconds
        self._final_attempts = final_attempts
        self._clock = clock
        self._env = dict(os.environ if environ is None else environ)
        for var in (*ENDPOINT_VARS, *REGION_VARS):  # not secret: the plan may set them
            if plan.env.get(var):
                self._env[var] = plan.env[var]
        self._secrets = [self._env[v] for v in CREDENTIAL_VARS if len(self._env.get(v, "")) >= 4]
        #: checkpoints on this node (the plan's unless the launch said otherwise)
        self.local_root = checkpoint_dir or plan.checkpoint_dir
        self._local = LocalStorage()
        self._problem: str | None = None
        self.root = ""
        self.storage: Storage = self._local
        try:
            self.policy = mirror.policy_of(plan.checkpoint_policy)
            uri = plan.checkpoint_storage or ""
            if storage is None:
                options = {"environ": self._env} if uri.startswith("s3://") else {}
                storage, base = resolve_location(uri, **options)
            else:
                base = uri
            self.storage = storage
            self.root = storage.join(base, plan.run_id)
        except CorralError as exc:
            self._problem = f"checkpoint storage: {exc}"
        self._cond = threading.Condition()
        self._uploaded: dict[str, str] = {}  # name -> manifest digest known to be in storage
        self._remote: dict[str, mirror.Entry] = {}  # complete remote checkpoints, last listing
        self._corrupt_remote: set[str] = set()
        self._bad_local: dict[str, str] = {}  # name -> digest of a corrupt local checkpoint
        self._failures: dict[tuple[str, str], int] = {}
        self._given_up: set[tuple[str, str]] = set()
        self._next_try = 0.0
        #: (name, digest) of the checkpoints the last pass found to upload
        self._pending: list[tuple[str, str]] = []
        self._uploading: str | None = None
        self._final = False
        self._last_reported = ""
        self.last_uploaded_step: int | None = None
        self.restored_step: int | None = None
        self.last_error: str | None = None
        self.warning: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the hook --------------------------------------------------------------------------

    def before_stages(self, runner: NodeRunner) -> str | None:
        if self._problem:
            return self._problem
        try:
            self._restore()
        except StorageError as exc:
            return f"checkpoint storage: {self._clean(str(exc))}"
        self._thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)
        self._thread.start()
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        if self._thread is None:
            return None  # nothing ran, so nothing new to upload
        self._warn_if_nothing()
        bounded = phase in ("stopped", "preempted")
        deadline = self._clock() + self.plan.grace_seconds if bounded else None
        with self._cond:
            self._final, self._next_try = True, 0.0
        self._wake.set()
        while True:
            local, _ = mirror.scan(self._local, self.local_root)
            with self._cond:
                targets = self._newest(local)
                rest = [] if bounded else self._todo(local)
                if not rest and all(self._uploaded.get(e.name) == e.digest for e in targets):
                    return None
                for e in targets:
                    if (e.name, e.digest) in self._given_up:
                        return f"checkpoint upload failed: {self.last_error}"
                if deadline is not None and self._clock() >= deadline:
                    names = ", ".join(e.name for e in targets)
                    return (
                        f"checkpoint {names} was not uploaded within the grace period "
                        f"({self.plan.grace_seconds:g} s)"
                    )
                self._cond.wait(0.2)

    def _warn_if_nothing(self) -> None:
        """Storage is set, yet the attempt left nothing corral recognises in the checkpoint
        directory (and the spec names no ``checkpoints.path``): say so instead of silence."""
        if self.plan.checkpoint_paths or self.restored_step is not None:
            return
        local, _ = mirror.scan(self._local, self.local_root)
        if local or self.last_uploaded_step is not None:
            return
        self.warning = (
            f"no checkpoint corral recognises in {self.local_root}: nothing was mirrored to "
            f"{self.plan.checkpoint_storage} (a script that saves on its own needs "
            "checkpoints.path)"
        )
        self._events.emit(
            "checkpoint.warning", data={"message": self.warning, "dir": self.local_root}
        )

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "checkpoint_sync": {
                    "warning": self.warning,
                    "uri": self.root or None,
                    "last_uploaded_step": self.last_uploaded_step,
                    "restored_step": self.restored_step,
                    # what is still not up as of now (a pass may be older than the last upload)
                    "pending": sum(1 for n, d in self._pending if self._uploaded.get(n) != d),
                    "uploading": self._uploading,
                    "last_error": self.last_error,
                }
            }

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- restore ---------------------------------------------------------------------------

    def _restore(self) -> None:
        local, _ = mirror.scan(self._local, self.local_root)
        newest: dict[str, int] = {}
        for e in local:
            newest[e.prefix] = max(newest.get(e.prefix, -1), e.step)
        remote, _ = mirror.scan(self.storage, self.root)
        with self._cond:
            self._remote = {e.name: e for e in remote}
            for e in local:
                if e.name in self._remote and self._remote[e.name].digest == e.digest:
                    self._uploaded[e.name] = e.digest
        for prefix in sorted({e.prefix for e in remote}):
            newer = [e for e in remote if e.prefix == prefix and e.step > newest.get(prefix, -1)]
            for e in reversed(newer):
                if self._restore_one(e):
                    break
        try:
            mirror.remove_stale_partials(self.storage, self.root)
        except StorageError:
            pass  # tidying only; the next attempt tries again

    def _restore_one(self, e: mirror.Entry) -> bool:
        uri = self.storage.join(self.root, e.name)
        started = self._clock()
        try:
            size = mirror.restore_checkpoint(e, self.storage, self.local_root)
        except CheckpointError as exc:
            with self._cond:
                self._corrupt_remote.add(e.name)
            reason = self._clean(str(exc))
            self._events.emit(
                "checkpoint.skipped",
                data={"step": e.step, "name": e.name, "uri": uri, "reason": reason},
            )
            return False
        with self._cond:
            self._uploaded[e.name] = e.digest
            self.restored_step = e.step
        self._events.emit(
            "checkpoint.restored",
            data={
                "step": e.step,
                "name": e.name,
                "uri": uri,
                "files": len(e.manifest.files),
                "bytes": size,
                "duration_s": round(self._clock() - started, 3),
                **_shards(e),
            },
        )
        return True

    # --- upload ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self._pass()
            except Exception as exc:  # the sync thread must not die: report and go on
                self._report(f"checkpoint sync error: {type(exc).__name__}: {exc}")
                busy = False
            with self._cond:
                self._cond.notify_all()
            if not busy:
                self._wake.wait(self._poll)
                self._wake.clear()

    def _newest(self, local: list[mirror.Entry]) -> list[mirror.Entry]:
        """The newest complete (not known corrupt) local checkpoint of each series."""
        newest: dict[str, mirror.Entry] = {}
        for e in local:
            if self._bad_local.get(e.name) != e.digest:
                newest[e.prefix] = e
        return list(newest.values())

    def _todo(self, local: list[mirror.Entry]) -> list[mirror.Entry]:
        """Local checkpoints to upload, newest first, without those retention would drop."""
        waiting = [
            e
            for e in local
            if self._uploaded.get(e.name) != e.digest
            and self._bad_local.get(e.name) != e.digest
            and (e.name, e.digest) not in self._given_up
        ]
        out: list[mirror.Entry] = []
        for prefix in {e.prefix for e in waiting}:
            pool = {
                n: r
                for n, r in self._remote.items()
                if r.prefix == prefix and n not in self._corrupt_remote
            }
            pool.update({e.name: e for e in waiting if e.prefix == prefix})
            keep = self.policy.keep(list(pool.values()))
            out.extend(e for e in waiting if e.prefix == prefix and e.step in keep)
        return sorted(out, key=lambda e: (e.step, e.manifest.time), reverse=True)

    def _pass(self) -> bool:
        """One look at the local directory; uploads at most one checkpoint. True if it did
        something (look again at once)."""
        local, _ = mirror.scan(self._local, self.local_root)
        with self._cond:
            todo = self._todo(local)
            self._pending = [(e.name, e.digest) for e in todo]
            if not todo or self._clock() < self._next_try:
                return False
            entry = todo[0]
            if entry.name in self._remote and self._remote[entry.name].digest == entry.digest:
                self._uploaded[entry.name] = entry.digest  # already there (e.g. restored)
                return True
            self._uploading = entry.name
        started = self._clock()
        try:
            size = mirror.upload_checkpoint(entry, self.storage, self.root)
        except (FileNotFoundError, CheckpointError) as exc:
            if not os.path.isdir(entry.path):
                return True  # the job's retention deleted it meanwhile: nothing to mirror
            if isinstance(exc, CheckpointError):
                self._skip_local(entry, str(exc))
                return True
            self._failed(entry, exc)
            return False
        except Exception as exc:
            self._failed(entry, exc)
            return False
        finally:
            with self._cond:
                self._uploading = None
        self._uploaded_ok(entry, size, self._clock() - started)
        return True

    def _uploaded_ok(self, entry: mirror.Entry, size: int, seconds: float) -> None:
        # the event first: once the upload counts as done, after_stages may end the attempt
        # and the controller's last read of the events must already include it
        self._events.emit(
            "checkpoint.uploaded",
            data={
                "step": entry.step,
                "name": entry.name,
                "uri": self.storage.join(self.root, entry.name),
                "files": len(entry.manifest.files),
                "bytes": size,
                "duration_s": round(seconds, 3),
                **_shards(entry),
            },
        )
        # the remote retention before the upload counts as done: after_stages ends the attempt
        # once it does, and the storage must then hold what the policy keeps, no more
        remaining: list[mirror.Entry] | None = None
        try:
            remaining, _ = mirror.apply_retention(
                self.storage,
                self.root,
                self.policy,
                ignore=set(self._corrupt_remote),
                protect=[entry.name],
            )
        except Exception as exc:
            self._report(f"remote checkpoint retention failed: {type(exc).__name__}: {exc}")
        with self._cond:
            if remaining is not None:
                self._remote = {e.name: e for e in remaining}
            self._remote[entry.name] = entry
            self._uploaded[entry.name] = entry.digest
            self._failures.pop((entry.name, entry.digest), None)
            self._next_try = 0.0
            if self.last_uploaded_step is None or entry.step >= self.last_uploaded_step:
                self.last_uploaded_step = entry.step
            if remaining is not None:
                self.last_error = None
                self._last_reported = ""

    def _skip_local(self, entry: mirror.Entry, reason: str) -> None:
        with self._cond:
            self._bad_local[entry.name] = entry.digest
        self._events.emit(
            "checkpoint.skipped",
            data={"step": entry.step, "name": entry.name, "uri": entry.path, "reason": reason},
        )

    def _failed(self, entry: mirror.Entry, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"
        key = (entry.name, entry.digest)
        retryable = getattr(exc, "retryable", not isinstance(exc, StorageError))
        with self._cond:
            count = self._failures[key] = self._failures.get(key, 0) + 1
            cap = FINAL_MAX_BACKOFF_S if self._final else MAX_BACKOFF_S
            self._next_try = self._clock() + min(cap, 2.0 ** (count - 1))
            if self._final and (not retryable or count >= self._final_attempts):
                self._given_up.add(key)
        self._report(f"upload of {entry.name} failed: {text}")

    def _report(self, message: str) -> None:
        message = self._clean(message)
        with self._cond:
            self.last_error = message
            if message == self._last_reported:
                return
            self._last_reported = message
        self._events.emit("agent.error", data={"hook": self.name, "message": message})

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)


def _shards(entry: mirror.Entry) -> dict[str, int]:
    """``{"shards": N}`` for a sharded checkpoint (every rank's files, one manifest: mirrored
    like any other checkpoint), else nothing."""
    world = entry.manifest.world_size
    return {} if world is None else {"shards": world}
