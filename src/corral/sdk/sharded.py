"""Sharded checkpoints: every rank writes its own part of one checkpoint, in parallel.

A state holding ``torch.distributed.tensor.DTensor`` s (FSDP2 ``fully_shard``, tensor
parallelism) is saved by every rank of the job at once, into one checkpoint directory::

    ckpt-<step>/
      r00000-state.pkl                 rank 0's skeleton (its plain tensors, RNG state, ...)
      r00000-tensors-00000.safetensors rank 0's tensors: its plain ones and its DTensor chunks
      r00000-dtensors.json             rank 0's chunks: name -> global shape, offsets, sizes
      r00001-...                       the same for every other rank
      COMPLETE                         written once, by rank 0, after every rank finished

Each DTensor chunk is written once: by the ranks that hold it first along each replicated mesh
dimension (``Replicate`` placements are not written twice); placements other than ``Shard``
and ``Replicate`` (``Partial``, strided shards) are redistributed to ``Replicate`` at the
snapshot. The ``COMPLETE`` manifest (format version 2, ``world_size``) lists every rank's files
with their sizes and sha256, so the agent's mirror, retention, restore and verification treat
a sharded checkpoint like any other: it exists once its manifest does.

The save protocol (the background writer of each rank, on a gloo group of its own, so that it
never interleaves with the training's collectives on the default group):

1. rank 0 prepares the directory (``.tmp`` on a local disk) and broadcasts its path (or why it
   could not);
2. every rank writes its files, hashing as it writes;
3. the ranks all_gather their file lists (or their error);
4. rank 0 writes ``COMPLETE`` and publishes the checkpoint, only if every rank succeeded, then
   broadcasts the outcome; every rank's ``wait()`` returns (or raises) with it.

A rank killed mid-save makes the collective fail on the others (gloo sees the closed
connection): nothing is published, the previous checkpoint stays the newest valid one, and the
``.tmp`` directory left is removed by the next save. The directory must be one that every rank
sees (one node, a shared filesystem, or an object store such as ``s3://``).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
from typing import Any

from corral.sdk import distributed
from corral.sdk.manifest import CheckpointError

#: Every rank's file names start with this prefix (``r00003-``).
RANK_PREFIX = "r{rank:05d}-"
#: A rank's chunk index (JSON), after its prefix.
INDEX_FILE = "dtensors.json"
#: How long a rank waits for the others at one step of the save protocol.
GROUP_TIMEOUT_S = float(os.environ.get("CORRAL_SHARDED_TIMEOUT_S") or 1800)


def rank_prefix(rank: int) -> str:
    return RANK_PREFIX.format(rank=rank)


def rank_of(fname: str) -> int | None:
    """The rank whose file ``fname`` is (``r00003-...`` -> 3), else None."""
    if len(fname) > 7 and fname[0] == "r" and fname[6] == "-" and fname[1:6].isdigit():
        return int(fname[1:6])
    return None


def dtensor_type() -> Any:
    """``DTensor`` if the script has loaded it (corral never imports it itself), else None."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def is_dtensor(obj: Any) -> bool:
    cls = dtensor_type()
    return cls is not None and isinstance(obj, cls)


def has_dtensors(state: Any, depth: int = 0) -> bool:
    """Whether ``state`` holds a DTensor (through dicts, lists and tuples)."""
    if depth > 12 or dtensor_type() is None:
        return False
    if is_dtensor(state):
        return True
    if isinstance(state, dict):
        return any(has_dtensors(v, depth + 1) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(has_dtensors(v, depth + 1) for v in state)
    return False


def _plain_placements(dt: Any) -> Any:
    """``dt`` with every placement other than Shard/Replicate made Replicate (a collective)."""
    from torch.distributed.tensor import Replicate, Shard

    placements = tuple(dt.placements)
    if all(type(p) in (Shard, Replicate) for p in placements):
        return dt
    wanted = [p if type(p) in (Shard, Replicate) else Replicate() for p in placements]
    return dt.redistribute(dt.device_mesh, wanted)


def local_chunk(dt: Any) -> tuple[Any | None, tuple[int, ...], tuple[int, ...]]:
    """``(local tensor or None, global offsets, sizes)`` of this rank's chunk of ``dt``: None
    when another rank writes it (a replica), the chunk is empty, or this rank is not in the
    mesh. Placements other than Shard/Replicate are redistributed first (every rank must call
    this for the same DTensors, in the same order: it may be a collective)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    dt = _plain_placements(dt)
    mesh = dt.device_mesh
    coordinate = mesh.get_coordinate()
    shape = tuple(dt.shape)
    if coordinate is None:
        return None, (0,) * len(shape), (0,) * len(shape)
    sizes, offsets = compute_local_shape_and_global_offset(shape, mesh, dt.placements)
    sizes, offsets = tuple(int(s) for s in sizes), tuple(int(o) for o in offsets)
    replica = any(
        isinstance(p, Replicate) and coordinate[i] != 0 for i, p in enumerate(dt.placements)
    )
    if replica or 0 in sizes:
        return None, offsets, sizes
    local = dt.to_local().detach()
    if tuple(local.shape) != sizes:  # a padded local shard: its first rows are the chunk
        for dim, size in enumerate(sizes):
            local = local.narrow(dim, 0, size)
    return local, offsets, sizes


# --- the checkpoint group ------------------------------------------------------------------

_group: Any = None
_group_of: Any = None  # the default group it was made for
_group_lock = threading.Lock()


def checkpoint_group() -> Any:
    """A gloo group of every rank, used only by sharded saves (made at the first one, on every
    rank at once: call it from the main thread at ``save()``). None when not distributed."""
    global _group, _group_of
    dist = distributed._dist()
    if dist is None:
        return None
    default = dist.distributed_c10d._get_default_group()
    with _group_lock:
        if _group is None or _group_of is not default:
            _group = dist.new_group(
                backend="gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S)
            )
            _group_of = default
        return _group


class Coordinator:
    """The collectives of one sharded save (see the module doc), on ``group`` (None: one
    process, where they are local)."""

    def __init__(self, group: Any, rank: int, world: int):
        self.group, self.rank, self.world = group, rank, world

    def _dist(self) -> Any:
        return sys.modules["torch"].distributed

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if self.group is None:
            return value
        box = [value]
        self._dist().broadcast_object_list(box, src=_global_rank(self.group, 0), group=self.group)
        return box[0]

    def all_gather(self, value: Any) -> list[Any]:
        if self.group is None:
            return [value]
        out: list[Any] = [None] * self.world
        self._dist().all_gather_object(out, value, group=self.group)
        return out


def _global_rank(group: Any, group_rank: int) -> int:
    dist = sys.modules["torch"].distributed
    try:
        return int(dist.get_global_rank(group, group_rank))
    except (AttributeError, RuntimeError, ValueError):
        return group_rank


def index_bytes(chunks: dict[str, dict[str, Any]], files: dict[str, str]) -> bytes:
    """A rank's chunk index: per DTensor name, its global shape and dtype, and (when this rank
    wrote a chunk of it) the chunk's offsets, sizes and tensor file."""
    out = {}
    for name, info in chunks.items():
        entry = dict(info)
        if name in files:
            entry["file"] = files[name]
        out[name] = entry
    return (json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n").encode()


def failure_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def raise_failed(name: str, failures: list[tuple[int, str]]) -> None:
    rank, why = failures[0]
    more = f" (and {len(failures) - 1} more ranks)" if len(failures) > 1 else ""
    raise CheckpointError(f"saving checkpoint {name} failed on rank {rank}{more}: {why}")
