"""The path mirror's snapshots in storage (``agent.path_mirror``): written, read, restored.

A snapshot is ``<root>/<seq>/`` (``seq``: ten digits) holding ``files/<item path>[/<file>]``
and a ``COMPLETE`` manifest written last (JSON: ``format``, the item's workdir ``path``, its
``kind``, ``time``, each file's size and sha256, the stages' progress ``steps``). Without the
manifest a snapshot does not exist. Every file is checked against its size and sha256 as it
streams in, into a temporary name renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from corral.agent.mirror import get_checked
from corral.agent.path_items import OLD_SUFFIX, RESTORE_SUFFIX, Item, safe_rel
from corral.sdk.manifest import MANIFEST_NAME
from corral.sdk.storage import CHUNK_BYTES, Storage

FORMAT = "corral-mirror"


@dataclass(frozen=True)
class Snapshot:
    """A complete snapshot in storage."""

    seq: int
    rel: str
    kind: str
    time: float
    files: dict[str, tuple[int, str]]  # name in the item -> (size, sha256)
    path: str  # the snapshot's directory in storage
    #: the stages' progress steps when it was copied
    steps: dict[str, int] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


class Changed(Exception):
    """A file changed while it was uploaded."""


def sequence_numbers(storage: Storage, root: str) -> Iterator[int]:
    """The sequence numbers of the snapshot directories under ``root``, complete or not."""
    for name in storage.listdir(root):
        if name.isdigit() and len(name) == 10:
            yield int(name)


def snapshot_dir(storage: Storage, root: str, seq: int) -> str:
    return storage.join(root, f"{seq:010d}")


def read_snapshot(storage: Storage, root: str, seq: int) -> Snapshot | None:
    """Snapshot ``seq`` under ``root``; None when it is not complete (yet) or its manifest is
    not one this agent can trust (another format, a path outside the workdir)."""
    path = snapshot_dir(storage, root, seq)
    try:
        data = json.loads(storage.read_bytes(storage.join(path, MANIFEST_NAME)))
        if data.get("format") != FORMAT or data.get("kind") not in ("file", "dir"):
            return None
        files = {str(k): (int(v["size"]), str(v["sha256"])) for k, v in dict(data["files"]).items()}
        rel = str(data["path"])
        steps = data.get("steps") or {}
        steps = {str(k): int(v) for k, v in dict(steps).items() if isinstance(v, int)}
        if not safe_rel(rel):
            return None
        for name in files:
            if data["kind"] == "file" and name != "":
                return None
            if data["kind"] == "dir" and not safe_rel(name):
                return None
        return Snapshot(seq, rel, data["kind"], float(data["time"]), files, path, steps)
    except FileNotFoundError:
        return None  # not complete (yet)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def write_snapshot(
    storage: Storage,
    snap_dir: str,
    workdir: str,
    item: Item,
    wall: Callable[[], float],
    steps: Callable[[], dict[str, int]],
    unchanged: Callable[[], bool],
) -> dict[str, dict[str, Any]]:
    """Copy ``item`` (under ``workdir``) into ``snap_dir`` and write its manifest last; its
    files' sizes and sha256s (the manifest's ``time`` and ``steps``: ``wall()`` and ``steps()``
    once the files are copied). :class:`Changed` (nothing left in storage) when a file's size
    differs from the look's, or ``unchanged()`` says the item changed while it was copied."""
    files: dict[str, dict[str, Any]] = {}
    try:
        for name, size, *_ in item.files:
            src = os.path.join(workdir, item.rel, name) if name else None
            src = src or os.path.join(workdir, item.rel)
            dst = storage.join(snap_dir, "files", item.rel, *([name] if name else []))
            files[name] = {"size": size, "sha256": _put(storage, src, dst, size)}
        if not unchanged():
            raise Changed()
        manifest = {
            "format": FORMAT,
            "format_version": 1,
            "path": item.rel,
            "kind": item.kind,
            "time": wall(),
            "files": files,
            "steps": steps(),
        }
        storage.makedirs(snap_dir)
        storage.write_bytes(
            storage.join(snap_dir, MANIFEST_NAME),
            json.dumps(manifest, indent=1, sort_keys=True).encode(),
        )
    except FileNotFoundError:
        quietly(storage.rmtree, snap_dir)
        raise Changed() from None
    except BaseException:
        quietly(storage.rmtree, snap_dir)
        raise
    return files


def matches(dest: str, local: Item, snap: Snapshot) -> bool:
    """The item at ``dest`` holds exactly the snapshot's files (sizes and sha256s)."""
    if local.kind != snap.kind or {f[0]: f[1] for f in local.files} != {
        k: v[0] for k, v in snap.files.items()
    }:
        return False
    for name, (_, sha) in snap.files.items():
        if _sha256(os.path.join(dest, name) if name else dest) != sha:
            return False
    return True


def download(storage: Storage, snap: Snapshot, dest: str) -> int:
    """Restore ``snap`` to ``dest`` (replaced whole, once every file checked); its bytes.
    :class:`~corral.sdk.manifest.CheckpointError` for a missing or corrupt file (``dest`` as
    it was)."""
    work = dest + RESTORE_SUFFIX
    remove(work)
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    total = 0
    try:
        for name, (size, sha) in snap.files.items():
            target = os.path.join(work, name) if snap.kind == "dir" else work
            src = storage.join(snap.path, "files", snap.rel, *([name] if name else []))
            get_checked(storage, src, target, size, sha, name or posixpath.basename(snap.rel))
            total += size
        if snap.kind == "dir":
            os.makedirs(work, exist_ok=True)  # an empty directory has no file to make it
        old = dest + OLD_SUFFIX
        remove(old)
        if os.path.lexists(dest):
            os.replace(dest, old)
        os.replace(work, dest)
        remove(old)
    except BaseException:
        remove(work)
        raise
    return total


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _put(storage: Storage, src: str, dst: str, size: int) -> str:
    """Copy ``src`` to ``dst``; its sha256. A size other than ``size`` is a change."""
    digest = hashlib.sha256()
    seen = 0
    storage.makedirs(dst.rsplit("/", 1)[0])
    writer = storage.open_write(dst)
    try:
        with open(src, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_BYTES):
                digest.update(chunk)
                seen += len(chunk)
                writer.write(chunk)
        if seen != size:
            raise Changed()
    except BaseException:
        getattr(writer, "abort", writer.close)()
        raise
    writer.close()
    return digest.hexdigest()


def remove(path: str) -> None:
    """Remove a file or a directory tree, if there."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn``, ignoring its failure (a clean-up after another failure: the first error
    is the one to report)."""
    try:
        fn(*args)
    except Exception:
        pass
