"""Mirror the checkpoints a script writes on its own (``checkpoints.path``) and restore them.

For scripts that do not use corral's SDK: the plan names workdir-relative files, directories or
globs (``plan.checkpoint_paths``: ``ckpt.pt``, ``out/checkpoint-*``, ``runs/*/weights/last.pt``).
Each match is one *item* (a file, or a directory with every file under it).

Remote layout: ``<checkpoint_storage>/<run_id>/mirror/<seq>/`` (``seq``: ten digits, growing
over the run's attempts), holding ``files/<item path>[/<file>]`` and a ``COMPLETE`` manifest
written last (JSON: the item's workdir path, its kind, time, each file's size and sha256).
Without ``COMPLETE`` a snapshot does not exist.

* **settled**: an item is mirrored once it has *settled*: every file in it unchanged for
  ``plan.checkpoint_settle_s`` (by its mtime, and the same between two looks), or the item
  appeared through a rename (written elsewhere, then moved into place) - at once. A rename
  shows as another inode at the path than at the previous look (writing in place keeps the
  inode), or a new one whose files were last written before that look, with no process
  holding any of its files open for writing; or as a status change after the last write (a
  file's ``ctime > mtime``; a directory's after its last entry was made). While a file is read for
  the upload it must not change: after the copy every file is looked at again, and a changed
  one discards the snapshot (no manifest), so a checkpoint caught mid-write is never mirrored.
* **after the stages**: one more look, with the stage's exit as "now": what settled before the
  exit (or was renamed into place) and is not up yet is mirrored; a file still being written
  when the job died is not.
* **before the stages**: what the workdir holds already (and was not restored) is mirrored
  only once the job writes it again. The newest complete snapshot is restored to its path in the workdir
  (each file's size and sha256 checked as it streams in, into a ``.corral-restore`` name
  renamed into place); a corrupt one is skipped (``checkpoint.skipped``) for the one before.
  A workdir that already holds it (the same machine) is not downloaded again. Either way the
  stages then resume from it (``runner.set_resume``: ``CORRAL_RESUME=1``,
  ``CORRAL_RESUME_FROM=<path>``, the stage's ``resume_args``). Without storage, from the
  second attempt on, the newest item already in the workdir is the one resumed from.
* retention: the newest ``CORRAL_CHECKPOINT_KEEP_LAST`` snapshots are kept.
* storage set and nothing recognised at the paths for the whole attempt: a
  ``checkpoint.warning`` event and ``status()["checkpoint_mirror"]["warning"]``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import posixpath
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.agent.mirror import policy_from_env
from corral.errors import CorralError
from corral.sdk.manifest import MANIFEST_NAME, CheckpointError
from corral.sdk.storage import CHUNK_BYTES, LocalStorage, Storage, resolve_location
from corral.storage.errors import StorageError
from corral.storage.s3_client import CREDENTIAL_VARS, ENDPOINT_VARS, REGION_VARS, redact
from corral.wire.events import (
    AGENT_ERROR,
    CHECKPOINT_RESTORED,
    CHECKPOINT_SKIPPED,
    CHECKPOINT_UPLOADED,
    CHECKPOINT_WARNING,
)
from corral.wire.node import EventSink, NodeRunner
from corral.wire.plan import AgentPlan

FORMAT = "corral-mirror"
RESTORE_SUFFIX = ".corral-restore"
OLD_SUFFIX = ".corral-old"
MIRROR_DIR = "mirror"
#: one file of an item: (path relative to the item, size, mtime_ns, ctime_ns, inode)
FileSig = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class Item:
    """One match of a checkpoint path: a file or a directory, relative to the workdir."""

    rel: str
    kind: str  # "file" or "dir"
    files: tuple[FileSig, ...]
    #: a directory's own mtime and ctime (0 for a file)
    dir_times: tuple[int, int] = (0, 0)
    #: the inode at the item's path (the file's, or the directory's)
    ino: int = 0

    @property
    def newest_mtime_ns(self) -> int:
        return max((f[2] for f in self.files), default=0)

    @property
    def renamed(self) -> bool:
        """Moved into place whole: a file whose status changed after its last write; a
        directory whose status changed after its last entry was made, and no later than its
        files' last writes (timestamps are coarse: the rename may share their tick)."""
        if not self.files:
            return False
        if self.kind == "file":
            return self.files[0][3] > self.files[0][2]
        mtime, ctime = self.dir_times
        return ctime > mtime and ctime >= self.newest_mtime_ns

    @property
    def content(self) -> tuple[tuple[str, int, int, int], ...]:
        """What identifies this version of the item (ctimes left out: a rename is no change)."""
        return tuple((f[0], f[1], f[2], f[4]) for f in self.files)


@dataclass(frozen=True)
class Snapshot:
    """A complete snapshot in storage."""

    seq: int
    rel: str
    kind: str
    time: float
    files: dict[str, tuple[int, str]]  # name in the item -> (size, sha256)
    path: str  # the snapshot's directory in storage

    @property
    def size_bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def _safe_rel(text: str) -> bool:
    if not text or text.startswith("/") or "\\" in text or "\0" in text:
        return False
    parts = text.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def find_items(workdir: str, patterns: list[str]) -> list[Item]:
    """The items at ``patterns`` in ``workdir`` (oldest first by their newest file); files
    of corral's own restores, and empty directories, are left out."""
    found: dict[str, Item] = {}
    for pattern in patterns:
        for match in glob.glob(os.path.join(workdir, pattern), recursive=True):
            rel = os.path.relpath(match, workdir).replace(os.sep, "/")
            if rel in found or not _safe_rel(rel) or rel.endswith((RESTORE_SUFFIX, OLD_SUFFIX)):
                continue
            item = _item(match, rel)
            if item is not None and item.files:
                found[rel] = item
    # an item inside another (``out/*`` and ``out/ckpt-1/*``) is mirrored with its parent only
    rels = sorted(found)
    out = [
        found[r]
        for r in rels
        if not any(r.startswith(o + "/") for o in rels if o != r and found[o].kind == "dir")
    ]
    return sorted(out, key=lambda i: (i.newest_mtime_ns, i.rel))


def _item(path: str, rel: str) -> Item | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        sig = ("", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        return Item(rel, "file", (sig,), ino=st.st_ino)
    if not stat.S_ISDIR(st.st_mode):
        return None
    files: list[FileSig] = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                fst = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(fst.st_mode):
                continue
            inner = os.path.relpath(full, path).replace(os.sep, "/")
            files.append((inner, fst.st_size, fst.st_mtime_ns, fst.st_ctime_ns, fst.st_ino))
    return Item(rel, "dir", tuple(files), (st.st_mtime_ns, st.st_ctime_ns), st.st_ino)


def _rescan(workdir: str, item: Item) -> Item | None:
    return _item(os.path.join(workdir, item.rel), item.rel)


class PathMirror:
    """The node hook that mirrors and restores the checkpoints at ``plan.checkpoint_paths``."""

    name = "checkpoint_mirror"

    def __init__(
        self,
        plan: AgentPlan,
        events: EventSink,
        *,
        storage: Storage | None = None,
        environ: Mapping[str, str] | None = None,
        poll_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.plan = plan
        self.patterns = list(plan.checkpoint_paths)
        self.workdir = plan.workdir
        self.settle_s = plan.checkpoint_settle_s
        self._events = events
        self._poll = poll_seconds
        self._clock, self._wall = clock, wall
        env = dict(os.environ if environ is None else environ)
        for var in (*ENDPOINT_VARS, *REGION_VARS):  # not secret: the plan may set them
            if plan.env.get(var):
                env[var] = plan.env[var]
        self._secrets = [env[v] for v in CREDENTIAL_VARS if len(env.get(v, "")) >= 4]
        self._problem: str | None = None
        self.storage: Storage | None = None
        self.root = ""
        self.keep_last = 3
        if plan.checkpoint_storage:
            try:
                self.keep_last = policy_from_env(plan.env).keep_last
                uri = plan.checkpoint_storage
                if storage is None:
                    options = {"environ": env} if uri.startswith("s3://") else {}
                    storage, base = resolve_location(uri, **options)
                else:
                    base = uri
                self.storage = storage
                self.root = storage.join(base, plan.run_id, MIRROR_DIR)
            except CorralError as exc:
                self._problem = f"checkpoint storage: {exc}"
        self._lock = threading.Lock()
        self._done: dict[str, tuple[Any, ...]] = {}  # rel -> content mirrored (or restored)
        self._seen: dict[str, tuple[Any, ...]] = {}  # rel -> content at the previous look
        self._next_seq = 1
        self._last_look: float | None = None  # wall time of the previous look
        self._last_inodes: dict[str, int] = {}  # rel -> inode at its path then
        self.recognised = False
        self.uploaded = 0
        self.last_uploaded: str | None = None
        self.restored: str | None = None
        self.last_error: str | None = None
        self.warning: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the hook --------------------------------------------------------------------------

    def before_stages(self, runner: NodeRunner) -> str | None:
        if self._problem:
            return self._problem
        try:
            path = self._restore() if self.storage is not None else self._newest_local()
        except StorageError as exc:
            return f"checkpoint storage: {self._clean(str(exc))}"
        if path is not None:
            runner.set_resume(path)
        if self.storage is not None:
            # what is there already and not restored (a checkpoint an earlier attempt on this
            # machine left half-written, say) is not mirrored unless the job writes it again
            for item in self._look():
                self._done.setdefault(item.rel, item.content)
            self._thread = threading.Thread(
                target=self._loop, name="checkpoint-mirror", daemon=True
            )
            self._thread.start()
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        problem = None
        try:
            self._pass(final=True)
        except Exception as exc:
            problem = self._report(f"checkpoint mirror: {self._describe(exc)}")
        if not self.recognised:
            self.warning = (
                f"checkpoints.path {', '.join(self.patterns)} matched no checkpoint in the "
                f"workdir: nothing was mirrored to {self.plan.checkpoint_storage} (a new "
                "machine would start from scratch)"
            )
            self._events.emit(
                CHECKPOINT_WARNING, data={"message": self.warning, "paths": self.patterns}
            )
        return problem if phase == "succeeded" else None

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "checkpoint_mirror": {
                    "paths": self.patterns,
                    "uri": self.root or None,
                    "uploaded": self.uploaded,
                    "last_uploaded": self.last_uploaded,
                    "restored": self.restored,
                    "last_error": self.last_error,
                    "warning": self.warning,
                }
            }

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- restore ---------------------------------------------------------------------------

    def _newest_local(self) -> str | None:
        """Without storage: from the second attempt on, the newest item in the workdir (an
        earlier attempt on this machine left it; a first attempt never resumes, whatever an
        earlier run left in the directory)."""
        items = find_items(self.workdir, self.patterns)
        if not items or self.plan.attempt < 2:
            return None
        self.recognised = True
        return os.path.join(self.workdir, items[-1].rel)

    def snapshots(self) -> list[Snapshot]:
        """Complete snapshots in storage, oldest first (also sets the next sequence number)."""
        assert self.storage is not None
        out: list[Snapshot] = []
        highest = 0
        for name in self.storage.listdir(self.root):
            if not (name.isdigit() and len(name) == 10):
                continue
            highest = max(highest, int(name))
            snap = self._read_manifest(int(name))
            if snap is not None:
                out.append(snap)
        self._next_seq = max(self._next_seq, highest + 1)
        return sorted(out, key=lambda s: s.seq)

    def _read_manifest(self, seq: int) -> Snapshot | None:
        assert self.storage is not None
        path = self.storage.join(self.root, f"{seq:010d}")
        try:
            data = json.loads(self.storage.read_bytes(self.storage.join(path, MANIFEST_NAME)))
            if data.get("format") != FORMAT or data.get("kind") not in ("file", "dir"):
                return None
            files = {
                str(k): (int(v["size"]), str(v["sha256"])) for k, v in dict(data["files"]).items()
            }
            rel = str(data["path"])
            if not _safe_rel(rel):
                return None
            for name in files:
                if data["kind"] == "file" and name != "":
                    return None
                if data["kind"] == "dir" and not _safe_rel(name):
                    return None
            return Snapshot(seq, rel, data["kind"], float(data["time"]), files, path)
        except FileNotFoundError:
            return None  # not complete (yet)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def _restore(self) -> str | None:
        for snap in reversed(self.snapshots()):
            dest = os.path.join(self.workdir, snap.rel)
            started = self._clock()
            local = _item(dest, snap.rel)
            if local is not None and self._matches(dest, local, snap):
                size = 0
            else:
                try:
                    size = self._download(snap, dest)
                except CheckpointError as exc:
                    self._events.emit(
                        CHECKPOINT_SKIPPED,
                        data={
                            "name": snap.rel,
                            "uri": snap.path,
                            "reason": self._clean(str(exc)),
                        },
                    )
                    continue
            after = _item(dest, snap.rel)
            with self._lock:
                if after is not None:
                    self._done[snap.rel] = after.content
                self.restored = dest
                self.recognised = True
            self._events.emit(
                CHECKPOINT_RESTORED,
                data={
                    "name": snap.rel,
                    "path": dest,
                    "uri": snap.path,
                    "files": len(snap.files),
                    "bytes": size,
                    "duration_s": round(self._clock() - started, 3),
                },
            )
            return dest
        return None

    @staticmethod
    def _matches(dest: str, local: Item, snap: Snapshot) -> bool:
        if local.kind != snap.kind or {f[0]: f[1] for f in local.files} != {
            k: v[0] for k, v in snap.files.items()
        }:
            return False
        for name, (_, sha) in snap.files.items():
            if _sha256(os.path.join(dest, name) if name else dest) != sha:
                return False
        return True

    def _download(self, snap: Snapshot, dest: str) -> int:
        assert self.storage is not None
        work = dest + RESTORE_SUFFIX
        _remove(work)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        total = 0
        try:
            for name, (size, sha) in snap.files.items():
                target = os.path.join(work, name) if snap.kind == "dir" else work
                src = self.storage.join(snap.path, "files", snap.rel, *([name] if name else []))
                _get(self.storage, src, target, size, sha, name or posixpath.basename(snap.rel))
                total += size
            if snap.kind == "dir":
                os.makedirs(work, exist_ok=True)  # an empty directory has no file to make it
            old = dest + OLD_SUFFIX
            _remove(old)
            if os.path.lexists(dest):
                os.replace(dest, old)
            os.replace(work, dest)
            _remove(old)
        except BaseException:
            _remove(work)
            raise
        return total

    # --- mirror ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self._pass(final=False)
            except Exception as exc:  # the thread must not die: report and go on
                self._report(f"checkpoint mirror: {self._describe(exc)}")

    def _settled(self, item: Item, now_wall: float, final: bool) -> bool:
        if item.renamed:
            return True  # moved into place whole: at once
        quiet = now_wall - item.newest_mtime_ns / 1e9 >= self.settle_s
        return quiet and (final or self._seen.get(item.rel) == item.content)

    def _look(self) -> list[Item]:
        """The items now, remembering when this look began and which inode each path held."""
        now_wall = self._wall()
        items = find_items(self.workdir, self.patterns)
        self._last_inodes = {i.rel: i.ino for i in items}
        self._last_look = now_wall
        return items

    def _pass(self, final: bool) -> None:
        last_look, last_inodes = self._last_look, self._last_inodes
        items = self._look()
        now_wall = self._last_look or self._wall()
        if items:
            self.recognised = True
        moved = {
            i.rel
            for i in items
            if self._done.get(i.rel) != i.content
            and _moved_in(i, last_look, last_inodes)
            and not open_for_writing(_real_files(self.workdir, i))
        }
        for item in items:
            if self._done.get(item.rel) == item.content:
                continue
            settled = item.rel in moved or self._settled(item, now_wall, final)
            self._seen[item.rel] = item.content
            if settled and (final or not self._stop.is_set()):
                self._upload(item, now_wall)

    def _upload(self, item: Item, settled_wall: float) -> None:
        assert self.storage is not None
        seq = self._next_seq
        self._next_seq += 1
        snap_dir = self.storage.join(self.root, f"{seq:010d}")
        started = self._clock()
        files: dict[str, dict[str, Any]] = {}
        try:
            for name, size, *_ in item.files:
                src = os.path.join(self.workdir, item.rel, name) if name else None
                src = src or os.path.join(self.workdir, item.rel)
                dst = self.storage.join(snap_dir, "files", item.rel, *([name] if name else []))
                files[name] = {"size": size, "sha256": _put(self.storage, src, dst, size)}
            again = _rescan(self.workdir, item)
            if again is None or again.content != item.content:
                raise _Changed()
            manifest = {
                "format": FORMAT,
                "format_version": 1,
                "path": item.rel,
                "kind": item.kind,
                "time": self._wall(),
                "files": files,
            }
            self.storage.makedirs(snap_dir)
            self.storage.write_bytes(
                self.storage.join(snap_dir, MANIFEST_NAME),
                json.dumps(manifest, indent=1, sort_keys=True).encode(),
            )
        except (_Changed, FileNotFoundError):
            _quietly(self.storage.rmtree, snap_dir)
            return  # written (or deleted) meanwhile: looked at again when it settles
        except BaseException:
            _quietly(self.storage.rmtree, snap_dir)
            raise
        done_wall = self._wall()
        size = sum(f["size"] for f in files.values())
        self._events.emit(
            CHECKPOINT_UPLOADED,
            data={
                "name": item.rel,
                "uri": snap_dir,
                "files": len(files),
                "bytes": size,
                "duration_s": round(self._clock() - started, 3),
                "lag_s": round(max(0.0, done_wall - settled_wall), 3),
            },
        )
        with self._lock:
            self._done[item.rel] = item.content
            self.uploaded += 1
            self.last_uploaded = item.rel
            self.last_error = None
        self._retain()

    def _retain(self) -> None:
        """Keep the newest ``keep_last`` snapshots; drop the rest and stale partial ones."""
        assert self.storage is not None
        complete = self.snapshots()
        keep = {s.seq for s in complete[-self.keep_last :]}
        newest = max(keep, default=0)
        for name in self.storage.listdir(self.root):
            if not (name.isdigit() and len(name) == 10):
                continue
            seq = int(name)
            if seq not in keep and seq < newest:
                _quietly(self.storage.rmtree, self.storage.join(self.root, name))

    # --- reporting -------------------------------------------------------------------------

    def _report(self, message: str) -> str:
        message = self._clean(message)
        with self._lock:
            repeated = message == self.last_error
            self.last_error = message
        if not repeated:
            self._events.emit(AGENT_ERROR, data={"hook": self.name, "message": message})
        return message

    @staticmethod
    def _describe(exc: BaseException) -> str:
        return str(exc) if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)


def _moved_in(item: Item, last_look: float | None, last_inodes: Mapping[str, int]) -> bool:
    """The item was moved (renamed) into place since the previous look (wall time
    ``last_look``): its path held another inode then (writing in place keeps the inode), or
    none, yet its files were written before that look."""
    if last_look is None:
        return False
    was = last_inodes.get(item.rel)
    if was == item.ino:
        return False
    if was is not None:
        return True
    before = int(last_look * 1e9)
    return item.newest_mtime_ns <= before and item.dir_times[0] <= before


def open_for_writing(paths: set[str]) -> bool:
    """Some process on this node holds one of ``paths`` open for writing (Linux ``/proc``;
    elsewhere, or where it cannot be read, False)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") not in paths:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    flags = next(
                        int(line.split()[1], 8) for line in info if line.startswith("flags:")
                    )
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            if flags & (os.O_WRONLY | os.O_RDWR):
                return True
    return False


def _real_files(workdir: str, item: Item) -> set[str]:
    base = os.path.realpath(os.path.join(workdir, item.rel))
    return {os.path.join(base, f[0]) if f[0] else base for f in item.files}


class _Changed(Exception):
    """A file changed while it was uploaded."""


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
            raise _Changed()
    except BaseException:
        getattr(writer, "abort", writer.close)()
        raise
    writer.close()
    return digest.hexdigest()


def _get(storage: Storage, src: str, dst: str, size: int, sha: str, label: str) -> None:
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
            while chunk := reader.read(CHUNK_BYTES):
                seen += len(chunk)
                if seen > size:
                    raise CheckpointError(f"{label} is larger than the manifest says")
                digest.update(chunk)
                writer.write(chunk)
        if seen != size:
            raise CheckpointError(f"{label} has {seen} bytes, the manifest says {size}")
        if digest.hexdigest() != sha:
            raise CheckpointError(f"{label} does not match its sha256 (corrupt)")
    except BaseException:
        writer.abort()
        raise
    writer.close()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # cleanup after a failure: the first error is the one to report
        pass
