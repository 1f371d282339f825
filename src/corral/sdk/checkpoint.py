"""Atomic, fast, retained checkpoints with verified restore.

Layout (in ``dir``, default ``$CORRAL_CHECKPOINT_DIR`` else ``./checkpoints``)::

    ckpt-<step>.tmp/   being written: files fsynced, then COMPLETE written last and fsynced
    ckpt-<step>/       renamed from .tmp atomically, then the parent directory fsynced

Only a directory named ``ckpt-<step>`` (integer step, sorted as an integer) holding a valid
``COMPLETE`` manifest is a checkpoint. Leftover ``.tmp`` directories from a crash are ignored, and
removed by the next process that saves into the directory. Saving a step that exists replaces it
safely: the old one is renamed to ``ckpt-<step>.old`` (still used by readers if a crash leaves no
``ckpt-<step>``) and removed once the new one is in place. On an object store (no atomic rename)
checkpoints are written in place, and a re-save goes to a new ``ckpt-<step>.v<k>`` beside the old
copy, which is deleted once the new one is complete (see :mod:`corral.sdk.layout`). One process
writes a directory.

``save()`` returns once the state is snapshotted (tensors copied into reused CPU buffers, the rest
pickled); a background thread writes, hashes while writing, publishes, applies the retention
policy and appends a ``checkpoint`` record to the progress file. At most one save is in flight;
``wait()`` blocks until it is durable and re-raises its failure. Pending saves are flushed at
interpreter exit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from corral import __version__
from corral.errors import BadInput, CorralError
from corral.sdk import device_snapshot, distributed, progress_file, sharded
from corral.sdk.deserialize import read_all_verified
from corral.sdk.layout import Found, Layout
from corral.sdk.manifest import (
    MANIFEST_NAME,
    SINGLE_FORMAT_VERSION,
    CheckpointError,
    CheckpointInfo,
    CheckpointLoadError,
    CheckpointWarning,
    Manifest,
    clean_metrics,
)
from corral.sdk.retention import rank_best, retention_policy, select_to_keep
from corral.sdk.serialize import Snapshot, snapshot, write_snapshot
from corral.sdk.sharded_load import load_checkpoint
from corral.sdk.sharded_write import write_sharded
from corral.sdk.staging import StagingPool
from corral.sdk.storage import Storage, resolve_location
from corral.wire.env import ENV_CHECKPOINT_DIR

T = TypeVar("T")

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointLoadError",
    "CheckpointWarning",
    "Checkpointer",
]


class Checkpointer:
    """Save, list, retain and restore checkpoints of a training state (see the module doc)."""

    def __init__(
        self,
        dir: str | os.PathLike[str] | None = None,
        *,
        storage: Storage | None = None,
        keep_last: int | None = None,
        keep_best: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
        prefix: str = "ckpt",
        async_save: bool = True,
        grace_seconds: float | None = None,
    ):
        policy = retention_policy(keep_last, keep_best, metric, mode)
        if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix):
            raise BadInput(f"checkpoint prefix must be letters, digits, '_', '.', '-': {prefix!r}")
        if grace_seconds is not None and (
            isinstance(grace_seconds, bool)
            or not isinstance(grace_seconds, (int, float))
            or not grace_seconds >= 0
        ):
            raise BadInput(f"grace_seconds must be a number >= 0, got {grace_seconds!r}")
        location = dir if dir is not None else os.environ.get(ENV_CHECKPOINT_DIR) or "checkpoints"
        if not isinstance(location, (str, os.PathLike)):
            raise BadInput(f"checkpoint dir must be a path or URI, got {location!r}")
        if storage is not None and not isinstance(storage, Storage):
            raise BadInput(f"storage must implement corral.sdk.storage.Storage, got {storage!r}")
        if storage is None:
            self.storage, self.dir = resolve_location(location)
        else:
            self.storage, self.dir = storage, os.fspath(location)
        self.keep_last, self.keep_best = policy["keep_last"], policy["keep_best"]
        self.metric, self.mode = policy["metric"], policy["mode"]
        self.prefix = prefix
        self.async_save = async_save
        self.grace_seconds = grace_seconds
        self.last_saved_step: int | None = None
        self._layout = Layout(self.storage, self.dir, prefix)
        self._pool = StagingPool() if async_save else None
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._error: CheckpointError | None = None
        self._cleaned = False
        self._verified: dict[str, str] = {}  # name -> sha256 of a manifest verified here
        self._save_seconds: float | None = None
        #: True once this process made a sharded save (a state holding DTensors)
        self.sharded = False
        device_snapshot.install_if_cuda()
        _LIVE.add(self)

    # --- saving ---------------------------------------------------------------------------

    def save(self, state: Any, step: int, metrics: dict[str, Any] | None = None) -> None:
        """Snapshot ``state`` as checkpoint ``step`` and write it (in the background when
        ``async_save``). Waits for a save still in flight first and re-raises its failure."""
        if isinstance(step, bool):
            raise BadInput(f"step must be an integer >= 0, got {step!r}")
        try:
            step = int(step.__index__())
        except (AttributeError, TypeError):
            raise BadInput(f"step must be an integer >= 0, got {step!r}")
        if step < 0:
            raise BadInput(f"step must be an integer >= 0, got {step!r}")
        clean = clean_metrics(metrics)
        with self._lock:
            self._join(raise_error=True)
            _LIVE.add(self)  # flushed at exit, also when saving again after close()
            started = time.perf_counter()
            snap = snapshot(state, self._pool)
            coordinator = None
            if snap.sharded:  # every rank saves its part (the same call on every rank)
                group = sharded.checkpoint_group()
                coordinator = sharded.Coordinator(
                    group, distributed.rank(), distributed.world_size()
                )
                self.sharded = True
            if not self.async_save:
                self._write(snap, step, clean, started, coordinator)
                self._join(raise_error=True)
                return
            self._thread = threading.Thread(
                target=self._write,
                args=(snap, step, clean, started, coordinator),
                name=f"corral-checkpoint-{step}",
                daemon=True,
            )
            self._thread.start()

    def reserve(self, state: Any) -> None:
        """Prepare the snapshot buffers for states shaped like ``state``, so that the first
        ``save()`` stalls the loop no longer than later ones.

        The first save of a process otherwise pays a page fault per 4 KiB of fresh buffer (about
        0.3 s per GiB on the reference machine, seconds for a large model). ``reserve`` only
        allocates (no copy) and leaves the page-touching to a background thread; the next
        ``save()`` or ``wait()`` waits for it. Call it once the model and optimizer exist (an
        optimizer's state appears after its first step: reserve after that step, or again
        later; buffers that still fit are kept). A no-op with ``async_save=False``."""
        if self._pool is None:
            return
        with self._lock:
            self._join(raise_error=True)
            _LIVE.add(self)
            pool = self._pool
            pool.reserving = True
            try:
                snapshot(state, pool)
            finally:
                pool.reserving = False
            self._thread = threading.Thread(
                target=pool.prefault, name="corral-checkpoint-reserve", daemon=True
            )
            self._thread.start()

    def wait(self) -> None:
        """Block until the save in flight (if any) is durable; re-raise its failure."""
        with self._lock:
            self._join(raise_error=True)

    def close(self) -> None:
        """Wait for the save in flight and release the snapshot buffers. The Checkpointer stays
        usable: a later ``save()`` allocates new buffers and is flushed at exit again."""
        try:
            self.wait()
        finally:
            self._pool = StagingPool() if self.async_save else None
            _LIVE.discard(self)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def estimated_save_seconds(self) -> float | None:
        """How long the last save took from ``save()`` to durable, or None before any."""
        return self._save_seconds

    def _join(self, *, raise_error: bool) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        if raise_error and self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write(
        self,
        snap: Snapshot,
        step: int,
        metrics: dict[str, Any],
        started: float,
        coordinator: sharded.Coordinator | None = None,
    ) -> None:
        name = f"{self.prefix}-{step}"
        try:
            if coordinator is not None:
                path, raw = write_sharded(
                    self._layout, self.storage, snap, step, metrics, coordinator, self._cleanup
                )
                if raw is not None:
                    self._verified[name] = hashlib.sha256(raw).hexdigest()
            else:
                path = self._write_checkpoint(snap, step, name, metrics)
        except Exception as exc:
            err = exc if isinstance(exc, CheckpointError) else None
            self._error = err or CheckpointError(f"saving checkpoint {name} failed: {exc}")
            self._error.__cause__ = exc
            return
        finally:
            if snap.pending is not None:  # failed before the copies from the GPU were settled
                _quietly(snap.pending.settle)
            del snap
        self._save_seconds = time.perf_counter() - started
        self.last_saved_step = step
        if coordinator is not None and coordinator.rank != 0:
            return  # rank 0 reports the checkpoint and applies the retention
        shards: dict[str, Any] = {} if coordinator is None else {"shards": coordinator.world}
        progress_file.emit("checkpoint", step=step, path=path, metrics=metrics, **shards)
        self._apply_retention(just_written=step)

    def _cleanup(self) -> None:
        """Remove what earlier writers left (once per Checkpointer; a failure only warns)."""
        if self._cleaned:
            return
        try:
            self._layout.cleanup()
            self._cleaned = True
        except (OSError, CorralError) as exc:  # leftovers only: this save can still go on
            warnings.warn(
                f"cleaning up what an earlier writer left in {self.dir} failed ({exc}); "
                "saving anyway, the next save tries again",
                CheckpointWarning,
                stacklevel=3,
            )

    def _write_checkpoint(self, snap: Snapshot, step: int, name: str, metrics: dict) -> str:
        st = self.storage
        self._cleanup()
        work, final = self._layout.begin(step)
        try:
            files = write_snapshot(snap, st, work)
            manifest = Manifest(
                format_version=SINGLE_FORMAT_VERSION,
                corral_version=__version__,
                step=step,
                time=time.time(),
                metrics=metrics,
                files=files,
            )
            raw = manifest.to_bytes()
            st.write_bytes(st.join(work, MANIFEST_NAME), raw)
            st.fsync_dir(work)
        except BaseException:
            st.rmtree(work)
            raise
        # Complete from here on: on an object store it may already be the step, so only the
        # layout may remove it (it does if publishing fails before it is in place).
        self._layout.publish(work, final)
        self._verified[name] = hashlib.sha256(raw).hexdigest()
        return final

    def _apply_retention(self, just_written: int) -> None:
        try:
            complete = self._complete(warn=False)
            keep = select_to_keep(
                [(m.step, m.metrics) for _, m in complete],
                self.keep_last,
                self.keep_best,
                self.metric,
                self.mode,
                protected=(just_written,),
            )
            for found, _ in complete:
                if found.step not in keep:
                    self._layout.drop(found)
                    self._verified.pop(found.name, None)
        except (OSError, CorralError) as exc:  # e.g. a StorageError of an object store
            warnings.warn(
                f"checkpoint retention failed in {self.dir}: {exc}", CheckpointWarning, stacklevel=2
            )

    # --- listing and restoring ------------------------------------------------------------

    def _complete(self, *, warn: bool) -> list[tuple[Found, Manifest]]:
        out = []
        for found in self._layout.scan():
            try:
                out.append(self._following(found, lambda f: (f, self._layout.read_manifest(f)[0])))
            except CheckpointError as exc:
                if warn:
                    _warn_skip(exc)
        return out

    def _following(self, found: Found, read: Callable[[Found], T]) -> T:
        """``read(found)``; if that fails because the writer (another process) replaced or
        moved that copy of the step after it was found, ``read`` the step's current copy."""
        for _ in range(3):
            try:
                return read(found)
            except CheckpointLoadError:
                raise
            except CheckpointError:
                try:
                    moved = self._layout.relocate(found)
                except (OSError, CorralError):
                    moved = None
                if moved is None:
                    raise  # the error of read(found)
                found = moved
        return read(found)

    def _verify(self, found: Found, manifest: Manifest, raw: bytes) -> None:
        key = hashlib.sha256(raw).hexdigest()
        st = self.storage
        if self._verified.get(found.name) == key and all(
            st.isfile(st.join(found.path, n)) and st.size(st.join(found.path, n)) == e.size
            for n, e in manifest.files.items()
        ):
            return  # this process wrote or already verified it, and the sizes still match
        read_all_verified(st, found.path, manifest.files, found.name, keep=False)
        self._verified[found.name] = key

    def _checked(self, found: Found, verify: bool) -> CheckpointInfo:
        manifest, raw = self._layout.read_manifest(found)
        if verify:
            try:
                self._verify(found, manifest, raw)
            except OSError as exc:
                raise CheckpointError(f"checkpoint {found.name}: cannot be read ({exc})")
        return CheckpointInfo.of(found, manifest)

    def checkpoints(self) -> list[CheckpointInfo]:
        """Complete checkpoints (a readable manifest), oldest first. Not sha256-verified."""
        self._join(raise_error=False)
        return [CheckpointInfo.of(f, m) for f, m in self._complete(warn=False)]

    def latest(self, *, verify: bool = True) -> CheckpointInfo | None:
        """The newest valid checkpoint (sha256-verified unless ``verify=False``), or None.

        Incomplete or corrupt ones are skipped with a :class:`CheckpointWarning` naming them.
        """
        self._join(raise_error=False)
        for found in reversed(self._layout.scan()):
            try:
                return self._following(found, lambda f: self._checked(f, verify))
            except CheckpointError as exc:
                _warn_skip(exc)
        return None

    def best(self, *, verify: bool = True) -> CheckpointInfo | None:
        """The best valid checkpoint by ``metric`` (ties: the newer), or None if none has it."""
        if not self.metric:
            raise BadInput("best() needs a Checkpointer created with metric=...")
        self._join(raise_error=False)
        complete = self._complete(warn=True)
        by_step = {f.step: f for f, _ in complete}
        for step in rank_best([(m.step, m.metrics) for _, m in complete], self.metric, self.mode):
            try:
                return self._following(by_step[step], lambda f: self._checked(f, verify))
            except CheckpointError as exc:
                _warn_skip(exc)
        return None

    def restore(
        self,
        path: str | os.PathLike[str] | CheckpointInfo | None = None,
        *,
        map_location="cpu",
        template: Any = None,
    ) -> Any:
        """The state saved in ``path``, or in the newest valid checkpoint when ``path`` is None.

        Every file is checked against its size and sha256 while it is read. Without ``path``,
        incomplete or corrupt checkpoints (missing, short or corrupt files, a bad manifest) are
        skipped with a :class:`CheckpointWarning` naming them and the previous one is tried;
        None is returned when no valid checkpoint exists (a fresh start). A checkpoint whose
        files verified but that cannot be loaded (a class moved or renamed, torch missing, an
        unusable ``map_location``, no permission to read, written by a newer corral) raises
        :class:`CheckpointLoadError` instead: falling back would lose training. With ``path``, a missing,
        incomplete or corrupt checkpoint raises :class:`CheckpointError`. ``map_location``
        moves torch tensors (default: CPU).

        Sharded checkpoints (:mod:`corral.sdk.sharded`) restore into any number of ranks:
        ``template``, a state shaped like the saved one whose DTensors have the mesh and
        placements wanted now, makes each saved DTensor (or full tensor) of the same name come
        back sharded like the template's; without it they come back whole. In a distributed
        job every rank must call ``restore`` (the ranks agree on the checkpoint: one that a rank
        finds corrupt is skipped by all). A ``torch.distributed.checkpoint`` directory given as
        ``path`` is read with DCP (no sha256 to check there; see :mod:`corral.sdk.dcp`).
        """
        self._join(raise_error=False)
        if path is not None:
            text = path.path if isinstance(path, CheckpointInfo) else os.fspath(path)
            from corral.sdk import dcp

            if dcp.is_dcp_checkpoint(text):
                return dcp.load_dcp(text, template=template)
            found = self._layout.locate(text)
            return self._following(found, lambda f: self._load(f, map_location, template))
        for found in reversed(self._layout.scan()):
            try:
                state = self._following(found, lambda f: self._load(f, map_location, template))
            except CheckpointLoadError:
                raise
            except CheckpointError as exc:
                _warn_skip(exc)
                continue
            return state
        return None

    def _load(self, found: Found, map_location: Any, template: Any = None) -> Any:
        manifest, raw = self._layout.read_manifest(found)
        state = load_checkpoint(self.storage, found, manifest, map_location, template)
        self._verified[found.name] = hashlib.sha256(raw).hexdigest()
        return state

    def __repr__(self) -> str:
        return f"Checkpointer({self.dir!r}, keep_last={self.keep_last}, keep_best={self.keep_best})"


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # the save already failed: that is the error reported
        pass


def _warn_skip(exc: CheckpointError) -> None:
    warnings.warn(f"skipping {exc}", CheckpointWarning, stacklevel=3)


_LIVE: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    """Interpreter exit: make every pending save durable (errors are reported, not raised)."""
    for cp in list(_LIVE):
        try:
            cp.wait()
        except Exception as exc:
            print(f"corral: {exc}", file=sys.stderr)
