"""A run's results: the manifest its last attempt wrote to artifact storage, one listed file,
or the whole results archive (``manifest.json`` and ``artifacts/<path>``, the layout of the
agent's ``results.tar.gz``) built from storage as it streams.

Storage is ``artifacts.storage`` of the spec (a local path, ``file://`` or ``s3://``: the
SDK's storage protocol, credentials from the environment as on the node). Only files the
manifest lists are served, so a request never names a path of its own. A run without
``artifacts.storage`` kept its files on its machine: they cannot be downloaded once it is gone.
"""

from __future__ import annotations

import gzip
import io
import json
import queue
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from corral.errors import Conflict, CorralError, NotFound
from corral.service._store import using
from corral.service.details import details
from corral.service.views import JsonObject, View
from corral.store import RunRecord, Store

MANIFEST = "manifest.json"
#: bytes read from storage at a time while streaming
CHUNK = 1024 * 1024
#: chunks an archive being built may hold before its reader takes them
PIPE_DEPTH = 8
#: gzip level of a built archive (weights barely compress: speed matters more)
COMPRESS_LEVEL = 1


class ArtifactFile(View):
    path: str
    size: int
    sha256: str


class Artifacts(View):
    """The manifest of the run's results and where they are."""

    run_id: str
    run_name: str
    manifest_uri: str
    artifacts_uri: str
    files: list[ArtifactFile]
    total_bytes: int
    manifest: JsonObject


@dataclass(frozen=True)
class Download:
    """Bytes to send: a file name to save them as, their size and sha256 where known."""

    filename: str
    media_type: str
    chunks: Iterator[bytes]
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Located:
    """A run's manifest read from artifact storage, and where its files are."""

    view: Artifacts
    storage: Any  # corral.sdk.storage.Storage
    root: str  # <storage>/<run_id>


def _manifest_uri(store: Store, run: RunRecord) -> str:
    """Where the run's manifest is in storage: what the agent reported, else the spec's
    ``artifacts.storage`` joined with the run id."""
    summary = details(store, run).manifest
    if isinstance(summary, dict) and isinstance(summary.get("uri"), str) and summary["uri"]:
        return str(summary["uri"])
    storage = ((run.spec or {}).get("artifacts") or {}).get("storage")
    if not storage:
        raise NotFound(
            f"run {run.id} has no artifact storage (artifacts.storage): its files stayed on "
            "its machine and cannot be downloaded from here"
        )
    return f"{str(storage).rstrip('/')}/{run.id}/{MANIFEST}"


def locate(ref: str, store: Store) -> Located:
    from corral.sdk.storage import resolve_location  # lazy: boto3 only for s3://

    run = store.get_run(ref)
    uri = _manifest_uri(store, run)
    storage, path = resolve_location(uri)
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        raise NotFound(f"run {run.id} has no manifest in storage yet ({uri})") from None
    except OSError as e:  # a local storage that cannot be read: one line, no traceback
        raise CorralError(f"reading {uri} failed: {e.strerror or type(e).__name__}") from None
    try:
        manifest = json.loads(raw)
        files = manifest["files"]
        listed = [
            ArtifactFile(path=p, size=int(f["size"]), sha256=str(f["sha256"]))
            for p, f in sorted(files.items())
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CorralError(f"{uri} is not a corral manifest") from None
    root = path.rsplit("/", 1)[0]
    view = Artifacts(
        run_id=run.id,
        run_name=run.name,
        manifest_uri=uri,
        artifacts_uri=uri.rsplit("/", 1)[0] + "/artifacts",
        files=listed,
        total_bytes=sum(f.size for f in listed),
        manifest=manifest,
    )
    return Located(view=view, storage=storage, root=root)


def artifacts(ref: str, *, store: Store | None = None) -> Artifacts:
    """The run's manifest (from artifact storage) and its files. NotFound when the run has
    no storage or no manifest there yet."""
    with using(store) as st:
        return locate(ref, st).view


def _read(storage: Any, path: str) -> Iterator[bytes]:
    with storage.open_read(path) as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _check_size(storage: Any, path: str, entry: ArtifactFile) -> None:
    size = storage.size(path)
    if size != entry.size:
        raise Conflict(
            f"{entry.path} in storage is {size} bytes but the manifest says {entry.size}: "
            "the storage changed after the run wrote it"
        )


def artifact_file(ref: str, path: str, *, store: Store | None = None) -> Download:
    """One file the manifest lists (by its workdir-relative path), streamed from storage;
    NotFound for a path it does not list."""
    with using(store) as st:
        found = locate(ref, st)
    entry = next((f for f in found.view.files if f.path == path), None)
    if entry is None:
        raise NotFound(f"run {found.view.run_id}'s manifest lists no file {path!r}")
    real = found.storage.join(found.root, "artifacts", *path.split("/"))
    _check_size(found.storage, real, entry)
    return Download(
        filename=path.rsplit("/", 1)[-1],
        media_type="application/octet-stream",
        chunks=_read(found.storage, real),
        size=entry.size,
        sha256=entry.sha256,
    )


class _Pipe(io.RawIOBase):
    """A file-like sink whose writes a reader takes as chunks, at most ``PIPE_DEPTH`` ahead;
    a write after :meth:`cancel` raises (the reader went away)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(PIPE_DEPTH)
        self.cancelled = threading.Event()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        while True:
            if self.cancelled.is_set():
                raise BrokenPipeError("the download was abandoned")
            try:
                self.chunks.put(bytes(data), timeout=0.5)
                return len(data)
            except queue.Full:
                continue

    def cancel(self) -> None:
        self.cancelled.set()


def _tar_stream(found: Located, on_error: Callable[[BaseException], None]) -> Iterator[bytes]:
    pipe = _Pipe()
    manifest = json.dumps(found.view.manifest, indent=2).encode()

    def build() -> None:
        try:
            with (
                gzip.GzipFile(fileobj=pipe, mode="wb", compresslevel=COMPRESS_LEVEL) as gz,
                tarfile.open(fileobj=gz, mode="w|", bufsize=CHUNK) as tar,
            ):
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mtime, info.mode = len(manifest), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(manifest))
                for entry in found.view.files:
                    real = found.storage.join(found.root, "artifacts", *entry.path.split("/"))
                    info = tarfile.TarInfo(f"artifacts/{entry.path}")
                    info.size, info.mtime, info.mode = entry.size, int(time.time()), 0o644
                    with found.storage.open_read(real) as f:
                        tar.addfile(info, f)
            pipe.chunks.put(None)
        except BaseException as e:  # the reader raises it (or went away already)
            if not pipe.cancelled.is_set():
                on_error(e)
                pipe.chunks.put(e)

    thread = threading.Thread(target=build, name="results-archive", daemon=True)
    thread.start()
    try:
        while (item := pipe.chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise CorralError(f"building the results archive failed: {item}") from None
            yield item
    finally:
        pipe.cancel()


def results_archive(
    ref: str,
    *,
    store: Store | None = None,
    on_error: Callable[[BaseException], None] = lambda e: None,
) -> Download:
    """The run's results as one ``.tar.gz`` (``manifest.json``, ``artifacts/<path>``), built
    from storage while it streams (memory: a few MiB whatever its size). Every file's size in
    storage is checked against the manifest first: Conflict on a mismatch, before any byte."""
    with using(store) as st:
        found = locate(ref, st)
    for entry in found.view.files:
        real = found.storage.join(found.root, "artifacts", *entry.path.split("/"))
        _check_size(found.storage, real, entry)
    return Download(
        filename=f"{found.view.run_id}-results.tar.gz",
        media_type="application/gzip",
        chunks=_tar_stream(found, on_error),
    )
