"""Reading checkpoint files back (the inverse of :mod:`corral.sdk.serialize`), verifying sha256.

Files are read in large chunks into one buffer and hashed as they arrive; tensors and arrays are
then views into that buffer (no second copy). See :mod:`corral.sdk.serialize` for the format and
the trust model (``state.pkl`` is a pickle: only restore checkpoints your own jobs wrote).
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import sys
from typing import Any

from corral.sdk.manifest import CheckpointError, FileEntry
from corral.sdk.serialize import _NUMPY_CODES, _TORCH_CODES, STATE_FILE, TENSORS_FILE
from corral.sdk.storage import CHUNK_BYTES, Storage

_ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4}
_ITEMSIZE |= {"F16": 2, "BF16": 2, "I16": 2, "U16": 2}
_ITEMSIZE |= {"I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def _check_size(storage: Storage, path: str, fname: str, entry: FileEntry, label: str) -> None:
    try:
        actual = storage.size(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {label}: {fname} is missing")
    if actual != entry.size:
        raise CheckpointError(
            f"checkpoint {label}: {fname} has {actual} bytes, the manifest says {entry.size} "
            "(truncated or overwritten)"
        )


def read_verified(
    storage: Storage, directory: str, fname: str, entry: FileEntry, label: str, *, keep: bool = True
) -> bytearray | None:
    """Read one file in large chunks, hashing as it arrives; raise if it does not match.

    With ``keep=False`` the bytes are only verified (a reused chunk buffer, nothing returned).
    """
    path = storage.join(directory, fname)
    _check_size(storage, path, fname, entry, label)
    size = entry.size
    buf = bytearray(size if keep else min(size, CHUNK_BYTES))
    view = memoryview(buf)
    digest = hashlib.sha256()
    pos = 0
    with storage.open_read(path) as f:
        while pos < size:
            at = pos if keep else 0
            n = f.readinto(view[at : at + min(CHUNK_BYTES, size - pos)])
            if not n:
                raise CheckpointError(f"checkpoint {label}: {fname} ended early (truncated)")
            digest.update(view[at : at + n])
            pos += n
    if digest.hexdigest() != entry.sha256:
        raise CheckpointError(f"checkpoint {label}: {fname} does not match its sha256 (corrupt)")
    return buf if keep else None


def _parse_header(buf: bytearray, label: str) -> tuple[int, dict[str, tuple[str, tuple, int, int]]]:
    bad = f"checkpoint {label}: {TENSORS_FILE} has an invalid header"
    if len(buf) < 8:
        raise CheckpointError(bad)
    hlen = int.from_bytes(buf[:8], "little")
    if 8 + hlen > len(buf):
        raise CheckpointError(bad)
    try:
        header = json.loads(bytes(buf[8 : 8 + hlen]))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(bad)
    base, data_len = 8 + hlen, len(buf) - 8 - hlen
    table: dict[str, tuple[str, tuple, int, int]] = {}
    if not isinstance(header, dict):
        raise CheckpointError(bad)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape = info["dtype"], tuple(int(d) for d in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
            count = 1
            for d in shape:
                count *= d
            ok = (
                code in _ITEMSIZE
                and 0 <= start <= end <= data_len
                and end - start == count * _ITEMSIZE[code]
            )
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise CheckpointError(f"{bad} (entry {name!r})")
        table[name] = (code, shape, base + start, base + end)
    return base, table


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, load: Any):
        super().__init__(file)
        self._load = load

    def persistent_load(self, pid: Any) -> Any:
        return self._load(pid)


def load_state(
    storage: Storage, directory: str, files: dict[str, FileEntry], label: str, map_location: Any
) -> Any:
    """Read, verify and rebuild the state written by :func:`write_snapshot`."""
    if STATE_FILE not in files:
        raise CheckpointError(f"checkpoint {label}: the manifest lists no {STATE_FILE}")
    raw = None
    table: dict[str, tuple[str, tuple, int, int]] = {}
    if TENSORS_FILE in files:
        raw = read_verified(storage, directory, TENSORS_FILE, files[TENSORS_FILE], label)
        _, table = _parse_header(raw, label)
    skeleton = read_verified(storage, directory, STATE_FILE, files[STATE_FILE], label)
    cache: dict[str, Any] = {}
    torch_base: list[Any] = []

    def materialize(pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "corral"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, kind, name, is_param, requires_grad = pid
        if name in cache:
            return cache[name]
        if name not in table or raw is None:
            raise CheckpointError(f"checkpoint {label}: tensor {name!r} is missing")
        code, shape, start, end = table[name]
        if kind == "torch":
            obj = _torch_tensor(raw, torch_base, code, shape, start, end, label)
            if map_location not in (None, "cpu"):
                obj = obj.to(map_location)
            if is_param:
                obj = sys.modules["torch"].nn.Parameter(obj, requires_grad=requires_grad)
            elif requires_grad:
                obj.requires_grad_(True)
        else:
            obj = _numpy_array(raw, code, shape, start, end, label)
        cache[name] = obj
        return obj

    try:
        return _Unpickler(io.BytesIO(skeleton), materialize).load()
    except CheckpointError:
        raise
    except Exception as exc:  # a pickle of anything can fail in many ways
        raise CheckpointError(f"checkpoint {label}: {STATE_FILE} cannot be loaded ({exc})")


def _torch_tensor(
    raw: bytearray, base: list[Any], code: str, shape: tuple, start: int, end: int, label: str
) -> Any:
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"checkpoint {label} holds torch tensors but torch is not installed")
    if not base:
        base.append(torch.frombuffer(raw, dtype=torch.uint8))
    dtype = getattr(torch, {v: k for k, v in _TORCH_CODES.items()}[code])
    data = base[0][start:end]
    if start % _ITEMSIZE[code]:
        data = data.clone()  # not aligned for an in-place view
    return data.view(dtype).reshape(shape)


def _numpy_array(raw: bytearray, code: str, shape: tuple, start: int, end: int, label: str) -> Any:
    try:
        import numpy as np
    except ImportError:
        raise CheckpointError(f"checkpoint {label} holds numpy arrays but numpy is not installed")
    names = {v: k for k, v in _NUMPY_CODES.items()}
    if code not in names:
        raise CheckpointError(f"checkpoint {label}: dtype {code} has no numpy equivalent")
    data = np.frombuffer(raw, dtype=np.uint8, count=end - start, offset=start)
    if start % _ITEMSIZE[code]:
        data = data.copy()
    return data.view(names[code]).reshape(shape)
