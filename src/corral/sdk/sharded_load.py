"""Restoring a sharded checkpoint, into any number of ranks (resharding).

Each rank reads the skeleton of the rank it was when saving (``r<k>-state.pkl``; rank 0's for a
rank that did not exist then, so per-rank values such as RNG states are exact only when the
world size is unchanged) and builds each DTensor it references:

* with a ``template`` (a state shaped like the saved one, whose DTensors have the mesh and
  placements wanted now, e.g. ``{"model": get_model_state_dict(fsdp_model), ...}``), as a
  DTensor sharded like the template's, from the parts of the saved chunks that overlap this
  rank's part; only the files holding those parts are read (and sha256-checked);
* without one (or for a name the template has no DTensor for), as a plain full tensor
  assembled from every chunk.

A template's DTensors can also reshard a checkpoint saved by one process (full tensors):
:func:`apply_template` cuts each full tensor to this rank's part.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from corral.sdk import distributed
from corral.sdk.deserialize import (
    _RESOURCE_ERRNOS,
    _torch_base,
    _torch_tensor,
    load_state,
    read_all_verified,
    read_verified,
    rebuild,
    tensor_table,
)
from corral.sdk.layout import Found
from corral.sdk.manifest import CheckpointError, CheckpointLoadError, Manifest
from corral.sdk.serialize import STATE_FILE, _collect_names, is_tensor_file
from corral.sdk.sharded import INDEX_FILE, dtensor_type, rank_of, rank_prefix
from corral.sdk.storage import Storage

Region = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes)


def load_checkpoint(
    storage: Storage, found: Found, manifest: Manifest, map_location: Any, template: Any
) -> Any:
    """The state of the checkpoint ``found`` (its ``manifest`` read), sharded or not, cut to
    ``template``'s shardings when one is given. In a distributed job the ranks restoring a
    sharded checkpoint agree on it: one that any rank finds corrupt is skipped by all, and
    one that any rank cannot load raises on all."""
    agree = manifest.world_size is not None and distributed.is_distributed()
    try:
        if manifest.world_size is not None:
            state = load_sharded(storage, found.path, manifest, found.name, map_location,
                                 template, distributed.rank())  # fmt: skip
        else:
            state = load_state(storage, found.path, manifest.files, found.name, map_location)
            if template is not None:
                state = apply_template(state, template)
    except PermissionError as exc:
        _agree(agree, -1.0, found)
        raise CheckpointLoadError(f"checkpoint {found.name}: cannot be read ({exc})") from exc
    except OSError as exc:
        _agree(agree, 0.0, found)
        raise CheckpointError(f"checkpoint {found.name}: cannot be read ({exc})") from None
    except CheckpointLoadError:
        _agree(agree, -1.0, found)
        raise
    except CheckpointError:
        _agree(agree, 0.0, found)
        raise
    _agree(agree, 1.0, found)
    return state


def _agree(agree: bool, mine: float, found: Found) -> None:
    """One all_reduce: 1 loaded, 0 corrupt (every rank skips it), -1 cannot be loaded (every
    rank raises)."""
    if not agree:
        return
    (agreed,) = distributed._all_reduce_min([mine])
    if agreed == mine:
        return
    if agreed < 0:
        raise CheckpointLoadError(
            f"checkpoint {found.name}: another rank cannot load it (see its error)"
        )
    raise CheckpointError(f"checkpoint {found.name}: another rank found it corrupt")


def template_dtensors(template: Any) -> dict[str, Any]:
    """The DTensors of ``template`` by the names a save of it gives them."""
    cls = dtensor_type()
    if template is None or cls is None:
        return {}
    names = _collect_names(template)
    found: dict[str, Any] = {}

    def walk(obj: Any, depth: int) -> None:
        if depth > 12:
            return
        if isinstance(obj, dict):
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, depth + 1)
        elif isinstance(obj, cls) and id(obj) in names:
            found[names[id(obj)]] = obj

    walk(template, 0)
    return found


def _target(like: Any, shape: tuple[int, ...]) -> Region | None:
    """This rank's part of a tensor of global ``shape`` sharded like DTensor ``like`` (None:
    ``like``'s placements are not plain Shard/Replicate: build the whole tensor)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if tuple(like.shape) != shape or not all(
        type(p) in (Shard, Replicate) for p in like.placements
    ):
        return None
    if like.device_mesh.get_coordinate() is None:
        return (0,) * len(shape), (0,) * len(shape)
    sizes, offsets = compute_local_shape_and_global_offset(shape, like.device_mesh, like.placements)
    return tuple(int(o) for o in offsets), tuple(int(s) for s in sizes)


def _overlap(a: Region, b: Region) -> Region | None:
    """The intersection of two boxes (global offsets, sizes), or None."""
    offsets, sizes = [], []
    for (ao, as_), (bo, bs) in zip(zip(*a, strict=True), zip(*b, strict=True), strict=True):
        lo, hi = max(ao, bo), min(ao + as_, bo + bs)
        if hi <= lo:
            return None
        offsets.append(lo)
        sizes.append(hi - lo)
    return tuple(offsets), tuple(sizes)


def _narrow(tensor: Any, base: tuple[int, ...], box: Region) -> Any:
    for dim, (offset, size) in enumerate(zip(*box, strict=True)):
        tensor = tensor.narrow(dim, offset - base[dim], size)
    return tensor


def _volume(sizes: tuple[int, ...]) -> int:
    count = 1
    for s in sizes:
        count *= s
    return count


def load_sharded(
    storage: Storage,
    directory: str,
    manifest: Manifest,
    label: str,
    map_location: Any,
    template: Any,
    rank: int,
) -> Any:
    world = manifest.world_size or 1
    src = rank if rank < world else 0
    files = manifest.files
    chunks: dict[str, list[tuple[str, Region]]] = {}
    meta: dict[str, tuple[tuple[int, ...], str]] = {}
    for r in range(world):
        index = rank_prefix(r) + INDEX_FILE
        if index not in files:
            raise CheckpointError(f"checkpoint {label}: the manifest lists no {index}")
        raw = read_verified(storage, directory, index, files[index], label)
        try:
            entries = json.loads(bytes(raw))  # type: ignore[arg-type]
            for name, info in entries.items():
                meta[name] = (tuple(int(d) for d in info["shape"]), str(info["dtype"]))
                if "file" in info:
                    region = (tuple(info["offsets"]), tuple(info["sizes"]))
                    chunks.setdefault(name, []).append((str(info["file"]), region))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"checkpoint {label}: {index} is invalid ({exc})") from None
    likes = template_dtensors(template)
    targets: dict[str, Region | None] = {}
    needed = {rank_prefix(src) + STATE_FILE}
    needed.update(n for n in files if rank_of(n) == src and is_tensor_file(n))
    for name, (shape, _) in meta.items():
        like = likes.get(name)
        if like is not None and tuple(like.shape) != shape:
            raise CheckpointLoadError(
                f"checkpoint {label}: DTensor {name!r} was saved with shape {list(shape)}, the "
                f"template's has {list(like.shape)}"
            )
        target = _target(like, shape) if like is not None else None
        targets[name] = target
        box = target or ((0,) * len(shape), shape)
        needed.update(f for f, region in chunks.get(name, []) if _overlap(box, region))
    unknown = sorted(n for n in needed if n not in files)
    if unknown:
        raise CheckpointError(f"checkpoint {label}: {unknown[0]} is not in the manifest")
    try:
        buffers = read_all_verified(
            storage, directory, {n: files[n] for n in needed}, label, keep=True
        )
    except OSError as exc:
        if exc.errno in _RESOURCE_ERRNOS:
            raise CheckpointLoadError(f"checkpoint {label}: cannot be read ({exc})") from exc
        raise
    skeleton = buffers.pop(rank_prefix(src) + STATE_FILE)
    per_file: dict[str, dict[str, tuple[str, str, tuple, int, int]]] = {}
    for fname, buf in buffers.items():
        for name, entry in tensor_table({fname: buf}, label).items():
            per_file.setdefault(fname, {})[name] = entry
    own: dict[str, tuple[str, str, tuple, int, int]] = {}
    for fname, table in per_file.items():
        if rank_of(fname) == src:
            own.update(table)
    bases: dict[str, Any] = {}

    def chunk_view(fname: str, name: str) -> Any:
        try:
            _, code, shape, start, end = per_file[fname][name]
        except KeyError:
            raise CheckpointError(f"checkpoint {label}: {fname} lacks chunk {name!r}") from None
        if fname not in bases:
            bases[fname] = _torch_base(buffers[fname], label)
        return _torch_tensor(bases[fname], code, shape, start, end)

    def build(pid: Any, move: Any) -> Any:
        _, _, name, is_param, requires_grad = pid
        if name not in meta:
            raise CheckpointError(f"checkpoint {label}: DTensor {name!r} is missing")
        shape, dtype = meta[name]
        target = targets.get(name)
        box = target or ((0,) * len(shape), shape)
        obj = _assemble(name, box, dtype, chunks.get(name, []), chunk_view, label)
        like = likes.get(name)
        obj = move(obj, name) if like is None else _as_like(obj, like, target is not None)
        torch = sys.modules["torch"]
        if is_param:
            return torch.nn.Parameter(obj, requires_grad=requires_grad)
        return obj.requires_grad_(True) if requires_grad else obj

    return rebuild(skeleton, buffers, own, label, map_location, other=build)


def _assemble(name: str, box: Region, dtype: str, parts: list, view: Any, label: str) -> Any:
    """The ``box`` of tensor ``name`` from the saved chunks that overlap it (a view of the file
    when one chunk is exactly the box)."""
    torch = sys.modules["torch"]
    offsets, sizes = box
    for fname, region in parts:
        if region == box:
            return view(fname, name)
    out = torch.empty(sizes, dtype=getattr(torch, dtype))
    covered = 0
    for fname, region in parts:
        common = _overlap(box, region)
        if common is None:
            continue
        _narrow(out, offsets, common).copy_(_narrow(view(fname, name), region[0], common))
        covered += _volume(common[1])
    if covered != _volume(sizes):
        raise CheckpointError(
            f"checkpoint {label}: the chunks of {name!r} do not cover it (a rank's part missing)"
        )
    return out


def _as_like(local_or_full: Any, like: Any, is_local: bool) -> Any:
    """A DTensor sharded like ``like``: from this rank's part, or from the whole tensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    device = like.to_local().device
    data = local_or_full.to(device=device)
    if is_local:
        return DTensor.from_local(data, like.device_mesh, like.placements, run_check=False,
                                  shape=like.shape, stride=like.stride())  # fmt: skip
    return distribute_tensor(data, like.device_mesh, like.placements, src_data_rank=None)


def apply_template(state: Any, template: Any) -> Any:
    """``state`` (restored from a checkpoint of full tensors) with each tensor that the
    template has a DTensor for, at the same name and shape, cut to this rank's part."""
    likes = template_dtensors(template)
    if not likes:
        return state
    torch = sys.modules["torch"]
    names = _collect_names(state)

    def walk(obj: Any, depth: int) -> Any:
        if depth > 12:
            return obj
        if type(obj) is dict:
            return {k: walk(v, depth + 1) for k, v in obj.items()}
        if type(obj) is list:
            return [walk(v, depth + 1) for v in obj]
        if type(obj) is tuple:
            return tuple(walk(v, depth + 1) for v in obj)
        like = likes.get(names.get(id(obj), ""))
        if (
            like is None
            or not isinstance(obj, torch.Tensor)
            or tuple(obj.shape) != tuple(like.shape)
        ):
            return obj
        target = _target(like, tuple(obj.shape))
        if target is not None:
            local = _narrow(obj.detach(), (0,) * obj.dim(), target).contiguous()
            out = _as_like(local, like, True)
        else:
            out = _as_like(obj.detach(), like, False)
        if isinstance(obj, torch.nn.Parameter):
            return torch.nn.Parameter(out, requires_grad=obj.requires_grad)
        return out

    return walk(state, 0)
