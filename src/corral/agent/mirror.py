"""Copy checkpoints between a local directory and a storage (any :class:`Storage`: s3://, a path).

A checkpoint is a directory ``<prefix>-<step>/`` holding its files and a ``COMPLETE`` manifest
(sha256 and size per file, see :mod:`corral.sdk.manifest`). Both directions keep the SDK's rules
(:class:`~corral.sdk.layout.Layout`):

* upload (:func:`upload_checkpoint`): every file first, each checked against the manifest while
  it is read (a corrupt local file is never mirrored), the manifest last. On a storage without
  atomic rename the files go straight into place and the manifest makes the checkpoint exist.
* restore (:func:`restore_checkpoint`): download into ``<name>.tmp/`` locally, checking every
  file's size and sha256 against the remote manifest as it streams in, write the manifest, then
  rename atomically into place. A mismatch raises :class:`CheckpointError` and leaves nothing.

Several series (prefixes, e.g. ``ckpt`` and ``ema``) may share a directory; each is listed,
retained and restored on its own.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral.sdk.layout import Found, Layout
from corral.sdk.manifest import MANIFEST_NAME, CheckpointError, FileEntry, Manifest
from corral.sdk.retention import select_to_keep
from corral.sdk.storage import CHUNK_BYTES, LocalStorage, Storage
from corral.storage.errors import SourceMismatch
from corral.wire.plan import CheckpointPolicy

#: A checkpoint directory: ``<prefix>-<step>``, or ``<prefix>-<step>.v<k>`` (a re-saved step on
#: an object store, see :mod:`corral.sdk.layout`).
_NAME = re.compile(r"(?P<prefix>[A-Za-z0-9_.-]+?)-(?P<step>0|[1-9][0-9]*)(?:\.v[1-9][0-9]*)?")
_SAFE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Entry:
    """One complete checkpoint (its manifest parsed) in some storage."""

    prefix: str
    step: int
    name: str
    path: str
    manifest: Manifest
    raw: bytes  # the manifest's bytes, copied as they are

    @property
    def digest(self) -> str:
        """Identifies this version of the checkpoint (a re-saved step has another)."""
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def size_bytes(self) -> int:
        return self.manifest.size_bytes


@dataclass(frozen=True)
class Policy:
    """The retention policy (see :func:`corral.sdk.retention.select_to_keep`)."""

    keep_last: int = 3
    keep_best: int = 0
    metric: str | None = None
    mode: str = "min"

    def keep(self, entries: list[Entry], protected: Iterable[int] = ()) -> set[int]:
        pairs = [(e.step, e.manifest.metrics) for e in entries]
        return select_to_keep(
            pairs, self.keep_last, self.keep_best, self.metric, self.mode, protected=protected
        )


def policy_of(plan: CheckpointPolicy) -> Policy:
    """The retention of the plan's checkpoint policy (the same the SDK's Checkpointer is
    given, as ``CORRAL_CHECKPOINT_KEEP_*``, by the agent)."""
    return Policy(plan.keep_last, plan.keep_best, plan.metric, plan.mode)


# --- listing ----------------------------------------------------------------------------------


def prefixes(storage: Storage, root: str) -> list[str]:
    found = set()
    for entry in storage.listdir(root):
        m = _NAME.fullmatch(entry)
        if m:
            found.add(m.group("prefix"))
    return sorted(found)


def scan(storage: Storage, root: str) -> tuple[list[Entry], list[Found]]:
    """Complete checkpoints (oldest first) and directories without a readable manifest."""
    complete: list[Entry] = []
    incomplete: list[Found] = []
    for prefix in prefixes(storage, root):
        layout = Layout(storage, root, prefix)
        for found in layout.scan():
            try:
                manifest, raw = layout.read_manifest(found)
            except CheckpointError:
                incomplete.append(found)
                continue
            assert found.step is not None
            complete.append(Entry(prefix, found.step, found.name, found.path, manifest, raw))
    complete.sort(key=lambda e: (e.step, e.manifest.time, e.prefix))
    return complete, incomplete


def _checked_names(entry: Entry) -> list[tuple[str, FileEntry]]:
    """The manifest's files, biggest first; a name that is not a plain file name is refused
    (a manifest must never make a restore write outside its directory)."""
    for fname in entry.manifest.files:
        if not _SAFE_FILE.fullmatch(fname) or fname == MANIFEST_NAME:
            raise CheckpointError(f"checkpoint {entry.name}: invalid file name {fname!r}")
    return sorted(entry.manifest.files.items(), key=lambda item: -item[1].size)


# --- upload -----------------------------------------------------------------------------------


def upload_checkpoint(entry: Entry, storage: Storage, root: str) -> int:
    """Upload the local checkpoint ``entry`` into ``root`` (files first, manifest last).
    Returns the bytes uploaded. A local file that does not match the manifest raises
    :class:`CheckpointError`; one that vanished (local retention) ``FileNotFoundError``."""
    files = _checked_names(entry)
    layout = Layout(storage, root, entry.prefix)
    work, final = layout.begin(entry.step)
    try:
        total = 0
        for fname, fentry in files:
            _put_file(storage, os.path.join(entry.path, fname), storage.join(work, fname), fentry)
            total += fentry.size
        storage.write_bytes(storage.join(work, MANIFEST_NAME), entry.raw)
        storage.fsync_dir(work)
    except SourceMismatch:
        _quietly(storage.rmtree, work)
        raise CheckpointError(
            f"local checkpoint {entry.name} does not match its manifest (corrupt): not uploaded"
        ) from None
    except BaseException:
        _quietly(storage.rmtree, work)
        raise
    # Complete from here on (on an object store it already is the step's copy): publishing
    # removes ``work`` itself if it fails before ``work`` is in place, and never after.
    layout.publish(work, final)
    return total


def _put_file(storage: Storage, src: str, dst: str, fentry: FileEntry) -> None:
    upload = getattr(storage, "upload_file", None)
    if upload is not None:
        if os.path.getsize(src) != fentry.size:
            raise SourceMismatch(f"{src} has the wrong size")
        upload(src, dst, sha256=fentry.sha256)
        return
    digest = hashlib.sha256()
    size = 0
    writer = storage.open_write(dst)
    try:
        with open(src, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
                writer.write(chunk)
        if size != fentry.size or digest.hexdigest() != fentry.sha256:
            raise SourceMismatch(f"{src} does not match its expected sha256")
    except BaseException:
        getattr(writer, "abort", writer.close)()
        raise
    writer.close()


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # cleanup after a failure: the first error is the one to report
        pass


# --- restore ----------------------------------------------------------------------------------


def restore_checkpoint(entry: Entry, storage: Storage, local_root: str) -> int:
    """Download the checkpoint ``entry`` from ``storage`` into ``local_root``, verified, and
    rename it into place atomically. Returns the bytes downloaded. A missing, truncated or
    corrupt file raises :class:`CheckpointError` and leaves nothing behind."""
    files = _checked_names(entry)
    local = LocalStorage()
    layout = Layout(local, local_root, entry.prefix)
    local.makedirs(local_root)
    work, final = layout.begin(entry.step)
    try:
        for fname, fentry in files:
            _get_file(storage, storage.join(entry.path, fname), os.path.join(work, fname), fentry)
        local.write_bytes(os.path.join(work, MANIFEST_NAME), entry.raw)
        local.fsync_dir(work)
        layout.publish(work, final)
    except CheckpointError as exc:
        local.rmtree(work)
        raise CheckpointError(f"checkpoint {entry.name}: {exc}") from None
    except BaseException:
        local.rmtree(work)
        raise
    return entry.size_bytes


def _get_file(storage: Storage, src: str, dst: str, fentry: FileEntry) -> None:
    get_checked(storage, src, dst, fentry.size, fentry.sha256, os.path.basename(dst))


def get_checked(storage: Storage, src: str, dst: str, size: int, sha256: str, label: str) -> None:
    """Copy ``src`` from ``storage`` to the local ``dst``, checking it is ``size`` bytes with
    ``sha256`` as it streams in (:class:`CheckpointError` naming ``label`` otherwise: missing,
    larger, truncated, corrupt; nothing left at ``dst``)."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    digest = hashlib.sha256()
    seen = 0
    try:
        reader = storage.open_read(src)
    except FileNotFoundError:
        raise CheckpointError(f"{label} is missing") from None
    writer = LocalStorage().open_write(dst)
    try:
        with reader:
            buf = bytearray(min(CHUNK_BYTES, max(size, 1)) + 1)
            view = memoryview(buf)
            while n := reader.readinto(view):
                seen += n
                if seen > size:
                    raise CheckpointError(
                        f"{label} is larger than the manifest says ({size} bytes)"
                    )
                digest.update(view[:n])
                writer.write(view[:n])
        if seen != size:
            raise CheckpointError(f"{label} has {seen} bytes, the manifest says {size} (truncated)")
        if digest.hexdigest() != sha256:
            raise CheckpointError(f"{label} does not match its sha256 (corrupt)")
    except BaseException:
        writer.abort()
        raise
    writer.close()


# --- retention and cleanup --------------------------------------------------------------------


def apply_retention(
    storage: Storage,
    root: str,
    policy: Policy,
    *,
    ignore: Iterable[str] = (),
    protect: Iterable[str] = (),
) -> tuple[list[Entry], list[str]]:
    """Delete the checkpoints in ``root`` that ``policy`` does not keep (each series on its own;
    names in ``ignore`` are neither counted nor deleted, names in ``protect`` always kept).
    Returns the complete checkpoints left and the names deleted."""
    ignore, protect = set(ignore), set(protect)
    complete, _ = scan(storage, root)
    dropped: list[str] = []
    for prefix in sorted({e.prefix for e in complete}):
        series = [e for e in complete if e.prefix == prefix and e.name not in ignore]
        keep = policy.keep(series, protected=[e.step for e in series if e.name in protect])
        layout = Layout(storage, root, prefix)
        for e in series:
            if e.step not in keep:
                layout.drop(Found(e.step, e.name, e.path))
                dropped.append(e.name)
    return [e for e in complete if e.name not in dropped], dropped


def remove_stale_partials(storage: Storage, root: str) -> list[str]:
    """Delete directories without a manifest older than their series' newest complete
    checkpoint (uploads a crashed attempt left). Returns the names deleted."""
    complete, incomplete = scan(storage, root)
    newest: dict[str, int] = {}
    for e in complete:
        newest[e.prefix] = max(newest.get(e.prefix, -1), e.step)
    removed = []
    for found in incomplete:
        m = _NAME.fullmatch(os.path.basename(found.path.rstrip("/")))
        if m and found.step is not None and found.step < newest.get(m.group("prefix"), -1):
            storage.rmtree(found.path)
            removed.append(found.name)
    return removed
