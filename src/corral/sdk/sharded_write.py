"""Writing one sharded checkpoint from every rank (the protocol is in :mod:`corral.sdk.sharded`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral import __version__
from corral.sdk.layout import Layout
from corral.sdk.manifest import (
    MANIFEST_NAME,
    SHARDED_FORMAT_VERSION,
    CheckpointError,
    FileEntry,
    Manifest,
)
from corral.sdk.serialize import Snapshot, write_snapshot
from corral.sdk.sharded import Coordinator, failure_text, raise_failed, rank_prefix
from corral.sdk.storage import Storage


def write_sharded(
    layout: Layout,
    storage: Storage,
    snap: Snapshot,
    step: int,
    metrics: dict[str, Any],
    coordinator: Coordinator,
    prepare: Callable[[], None],
) -> tuple[str, bytes | None]:
    """Write this rank's part of checkpoint ``step``; on rank 0 also the manifest, once every
    rank succeeded. Returns the checkpoint's path and (rank 0) the manifest's bytes. Raises
    :class:`CheckpointError` on every rank when any rank failed; nothing is published then.
    ``prepare`` (rank 0, before the directory is made) cleans up what earlier writers left."""
    name = layout.name(step)
    rank = coordinator.rank
    work = final = ""
    problem: str | None = None
    if rank == 0:
        try:
            prepare()
            work, final = layout.begin(step)
        except Exception as exc:
            problem = failure_text(exc)
    # 1. where to write (or why not): the same answer on every rank
    work, final, problem = coordinator.broadcast((work, final, problem))
    if problem is not None:
        raise CheckpointError(f"saving checkpoint {name} failed on rank 0: {problem}")
    published = False
    try:
        final, raw, published = _write_and_publish(
            layout, storage, snap, step, metrics, coordinator, work, final
        )
    except BaseException:
        if rank == 0 and not published:  # e.g. a peer died: a collective failed
            _quietly_remove(storage, work)
        raise
    return final, raw


def _write_and_publish(
    layout: Layout,
    storage: Storage,
    snap: Snapshot,
    step: int,
    metrics: dict[str, Any],
    coordinator: Coordinator,
    work: str,
    final: str,
) -> tuple[str, bytes | None, bool]:
    name = layout.name(step)
    rank, world = coordinator.rank, coordinator.world
    # 2. every rank writes its own files
    files: dict[str, FileEntry] | None = None
    mine: str | None = None
    try:
        files = write_snapshot(snap, storage, work, prefix=rank_prefix(rank))
    except Exception as exc:
        mine = failure_text(exc)
    # 3. every rank's files, or its error
    gathered = coordinator.all_gather(
        {n: e.model_dump() for n, e in files.items()} if files is not None else mine
    )
    failures = [(r, g) for r, g in enumerate(gathered) if isinstance(g, str)]
    raw: bytes | None = None
    outcome: str | None = None
    published = False
    if rank == 0:
        # 4. the manifest, only when every rank finished
        try:
            if failures:
                raise_failed(name, failures)
            merged: dict[str, FileEntry] = {}
            for part in gathered:
                merged.update({n: FileEntry(**e) for n, e in part.items()})
            manifest = Manifest(
                format_version=SHARDED_FORMAT_VERSION,
                corral_version=__version__,
                step=step,
                time=time.time(),
                metrics=metrics,
                files=merged,
                world_size=world,
            )
            raw = manifest.to_bytes()
            storage.write_bytes(storage.join(work, MANIFEST_NAME), raw)
            storage.fsync_dir(work)
        except Exception as exc:
            outcome = str(exc) if isinstance(exc, CheckpointError) else failure_text(exc)
            _quietly_remove(storage, work)
        if outcome is None:
            try:
                published = True  # from here on only the layout may remove it
                layout.publish(work, final)  # removes work itself if it fails before
            except Exception as exc:
                outcome = failure_text(exc)
    outcome = coordinator.broadcast(outcome)
    if outcome is not None:
        if rank == 0 or not failures:
            raise CheckpointError(
                outcome if outcome.startswith("saving checkpoint") else
                f"saving checkpoint {name} failed on rank 0: {outcome}"
            )  # fmt: skip
        raise_failed(name, failures)
    return final, raw, published


def _quietly_remove(storage: Storage, path: str) -> None:
    try:
        storage.rmtree(path)
    except Exception:  # the next writer's cleanup removes it
        pass
