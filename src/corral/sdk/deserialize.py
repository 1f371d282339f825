"""Reading checkpoint files back (the inverse of :mod:`corral.sdk.serialize`), verifying sha256.

Every file is checked against the size and sha256 in the manifest before anything is built
from it. Files are hashed in parallel, one thread per file up to the number of CPUs (hashlib
releases the GIL). On a local filesystem a tensor file is memory-mapped copy-on-write and hashed
straight from the page cache; the restored tensors and arrays are views of that mapping (writing
to them copies the touched pages privately, the file never changes). Elsewhere files are read in
large chunks into memory. See :mod:`corral.sdk.serialize` for the format and the trust model
(``state.pkl`` is a pickle: only restore checkpoints your own jobs wrote).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

from corral.sdk.manifest import CheckpointError, CheckpointLoadError, FileEntry
from corral.sdk.serialize import (
    _NUMPY_CODES,
    _TORCH_CODES,
    STATE_FILE,
    is_tensor_file,
    run_jobs,
)
from corral.sdk.storage import CHUNK_BYTES, Storage

_ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4}
_ITEMSIZE |= {"F16": 2, "BF16": 2, "I16": 2, "U16": 2}
_ITEMSIZE |= {"I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}

_TORCH_NAMES = {code: name for name, code in _TORCH_CODES.items()}
_NUMPY_NAMES = {code: name for name, code in _NUMPY_CODES.items()}

Buffer = bytearray | Any  # a bytearray, or the mapping Storage.map_file returns
#: Errors that say the machine ran out of something, not that a file is corrupt: never a reason
#: to skip a checkpoint and fall back to an older one.
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)


def _check_size(storage: Storage, path: str, fname: str, entry: FileEntry, label: str) -> None:
    try:
        actual = storage.size(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {label}: {fname} is missing") from None
    if actual != entry.size:
        raise CheckpointError(
            f"checkpoint {label}: {fname} has {actual} bytes, the manifest says {entry.size} "
            "(truncated or overwritten)"
        )


def _mismatch(label: str, fname: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {label}: {fname} does not match its sha256 (corrupt)")


def read_verified(
    storage: Storage, directory: str, fname: str, entry: FileEntry, label: str, *, keep: bool = True
) -> Buffer | None:
    """The bytes of one file, checked against its size and sha256 (CheckpointError if not).

    With ``keep=False`` the file is only checked and nothing is returned.
    """
    path = storage.join(directory, fname)
    _check_size(storage, path, fname, entry, label)
    size = entry.size
    map_file = getattr(storage, "map_file", None)
    if map_file is not None and size > 0:
        mapped = map_file(path)
        if len(mapped) != size:
            raise CheckpointError(f"checkpoint {label}: {fname} changed size while read")
        view = memoryview(mapped)
        try:
            digest = hashlib.sha256()
            for start in range(0, size, CHUNK_BYTES):
                digest.update(view[start : start + CHUNK_BYTES])
        finally:
            view.release()
        if digest.hexdigest() != entry.sha256:
            raise _mismatch(label, fname)
        return mapped if keep else None
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
        raise _mismatch(label, fname)
    return buf if keep else None


def read_all_verified(
    storage: Storage, directory: str, files: dict[str, FileEntry], label: str, *, keep: bool
) -> dict[str, Buffer | None]:
    """:func:`read_verified` for every file, in parallel; the first failure is raised."""
    names = sorted(files, key=lambda n: -files[n].size)
    workers = min(len(names), os.cpu_count() or 1)
    if workers <= 1:
        return {n: read_verified(storage, directory, n, files[n], label, keep=keep) for n in names}
    jobs: dict[str, Callable[[], Buffer | None]] = {
        n: functools.partial(read_verified, storage, directory, n, files[n], label, keep=keep)
        for n in names
    }
    return run_jobs(jobs, workers, "corral-verify")


def _parse_header(buf: Buffer, fname: str, label: str) -> dict[str, tuple[str, tuple, int, int]]:
    bad = f"checkpoint {label}: {fname} has an invalid header"
    if len(buf) < 8:
        raise CheckpointError(bad)
    hlen = int.from_bytes(buf[:8], "little")
    if 8 + hlen > len(buf):
        raise CheckpointError(bad)
    try:
        header = json.loads(bytes(buf[8 : 8 + hlen]))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(bad) from None
    if not isinstance(header, dict):
        raise CheckpointError(bad)
    base, data_len = 8 + hlen, len(buf) - 8 - hlen
    table: dict[str, tuple[str, tuple, int, int]] = {}
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
    return table


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, load: Any):
        super().__init__(file)
        self._load = load

    def persistent_load(self, pid: Any) -> Any:
        return self._load(pid)


def load_state(
    storage: Storage, directory: str, files: dict[str, FileEntry], label: str, map_location: Any
) -> Any:
    """Read, verify and rebuild the state written by :func:`~corral.sdk.serialize.write_snapshot`."""
    if STATE_FILE not in files:
        raise CheckpointError(f"checkpoint {label}: the manifest lists no {STATE_FILE}")
    unknown = [n for n in files if n != STATE_FILE and not is_tensor_file(n)]
    if unknown:
        raise CheckpointError(f"checkpoint {label}: unknown file {unknown[0]} in the manifest")
    try:
        buffers = read_all_verified(storage, directory, files, label, keep=True)
    except OSError as exc:
        if exc.errno in _RESOURCE_ERRNOS:
            raise CheckpointLoadError(
                f"checkpoint {label}: cannot be read ({exc}); the files are not known to be "
                "corrupt, so no older checkpoint is used instead"
            ) from exc
        raise
    skeleton = buffers.pop(STATE_FILE)
    return rebuild(skeleton, buffers, tensor_table(buffers, label), label, map_location)


def tensor_table(
    buffers: dict[str, Any], label: str
) -> dict[str, tuple[str, str, tuple, int, int]]:
    """Every tensor in the tensor files read: name -> (file, code, shape, start, end)."""
    table: dict[str, tuple[str, str, tuple, int, int]] = {}
    for fname, buf in buffers.items():
        for name, (code, shape, start, end) in _parse_header(buf, fname, label).items():
            table[name] = (fname, code, shape, start, end)
    return table


def rebuild(
    skeleton: Any,
    buffers: dict[str, Any],
    table: dict[str, tuple[str, str, tuple, int, int]],
    label: str,
    map_location: Any,
    other: Any = None,
) -> Any:
    """Unpickle ``skeleton``, its tensors read from ``buffers`` (located by ``table``);
    ``other(pid, move)`` builds the persistent ids that are not plain tensors (DTensors)."""
    cache: dict[str, Any] = {}
    torch_bases: dict[str, Any] = {}
    movers: list[Any] = []  # the map_location function, made at the first torch tensor

    def move(obj: Any, name: str) -> Any:
        if map_location is not None and not (
            isinstance(map_location, str) and map_location == "cpu"
        ):
            if not movers:
                movers.append(_mover(map_location, label))
            obj = movers[0](obj, name)
        return obj

    def materialize(pid: Any) -> Any:
        if other is not None and isinstance(pid, tuple) and len(pid) > 1 and pid[1] == "dtensor":
            return other(pid, move)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "corral"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, kind, name, is_param, requires_grad = pid
        if name in cache:
            return cache[name]
        if name not in table:
            raise CheckpointError(f"checkpoint {label}: tensor {name!r} is missing")
        fname, code, shape, start, end = table[name]
        if kind == "torch":
            base = torch_bases.get(fname)
            if base is None:
                base = torch_bases[fname] = _torch_base(buffers[fname], label)
            obj = move(_torch_tensor(base, code, shape, start, end), name)
            if is_param:
                obj = sys.modules["torch"].nn.Parameter(obj, requires_grad=requires_grad)
            elif requires_grad:
                obj.requires_grad_(True)
        else:
            obj = _numpy_array(buffers[fname], code, shape, start, end, label)
        cache[name] = obj
        return obj

    try:
        return _Unpickler(io.BytesIO(skeleton), materialize).load()
    except CheckpointError:
        raise
    except Exception as exc:  # the files verified: this is not corruption, so never skip it
        raise _load_error(label, exc) from exc


def _mover(map_location: Any, label: str) -> Any:
    """``move(tensor, name)`` putting a restored CPU tensor where ``map_location`` says, with
    ``torch.load``'s forms: a device (``"cuda:0"``, a ``torch.device``), a dict from saved
    location to device, or ``fn(storage, location)`` returning a storage on the device wanted
    (or None: stay). The tensors of a checkpoint are saved as host bytes: their location is
    ``"cpu"``. Each tensor goes to the function as a storage of its own bytes."""
    torch = sys.modules["torch"]

    def bad(why: str) -> CheckpointLoadError:
        return CheckpointLoadError(f"checkpoint {label}: map_location {map_location!r}: {why}")

    def device_of(where: Any) -> Any:
        if where is None:
            return None
        try:
            device = torch.device(where)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise bad(f"not a device ({exc})") from None
        if device.type == "cpu":
            return None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise bad(
                "CUDA is not available on this machine (torch.cuda.is_available() is False); "
                "restore with map_location='cpu'"
            )
        return device

    def to(tensor: Any, device: Any, name: str) -> Any:
        if device is None:
            return tensor
        try:
            return tensor.to(device)
        except Exception as exc:  # an ordinal beyond the devices present, no backend, ...
            raise bad(f"tensor {name!r} cannot go there: {type(exc).__name__}: {exc}") from exc

    if isinstance(map_location, dict):
        target = device_of(map_location.get("cpu", "cpu"))
        return lambda tensor, name: to(tensor, target, name)
    if callable(map_location) and not isinstance(map_location, torch.device):

        def call(tensor: Any, name: str) -> Any:
            size = tensor.element_size()
            begin = tensor.storage_offset() * size
            storage = tensor.untyped_storage()[begin : begin + tensor.numel() * size]
            result = map_location(storage, "cpu")
            if result is None:
                return tensor
            if not isinstance(getattr(result, "device", None), torch.device):
                raise bad(f"returned {type(result).__name__}, not a storage")
            return to(tensor, device_of(result.device), name)

        return call
    target = device_of(map_location)
    return lambda tensor, name: to(tensor, target, name)


def _load_error(label: str, exc: BaseException) -> CheckpointLoadError:
    hint = ""
    if isinstance(exc, (ImportError, AttributeError)):
        hint = " (a class moved or renamed since the save, or a package is missing?)"
    return CheckpointLoadError(
        f"checkpoint {label}: its files verified but {STATE_FILE} cannot be loaded: "
        f"{type(exc).__name__}: {exc}{hint}"
    )


def _torch_base(buf: Buffer, label: str) -> Any:
    try:
        import torch
    except ImportError:
        raise CheckpointLoadError(
            f"checkpoint {label} holds torch tensors but torch is not installed"
        ) from None
    return torch.frombuffer(buf, dtype=torch.uint8)


def _torch_tensor(base: Any, code: str, shape: tuple, start: int, end: int) -> Any:
    torch = sys.modules["torch"]
    dtype = getattr(torch, _TORCH_NAMES[code])
    data = base[start:end]
    if start % _ITEMSIZE[code]:
        data = data.clone()  # not aligned for an in-place view
    return data.view(dtype).reshape(shape)


def _numpy_array(raw: Buffer, code: str, shape: tuple, start: int, end: int, label: str) -> Any:
    try:
        import numpy as np
    except ImportError:
        raise CheckpointLoadError(
            f"checkpoint {label} holds numpy arrays but numpy is not installed"
        ) from None
    names = _NUMPY_NAMES
    if code not in names:
        raise CheckpointLoadError(f"checkpoint {label}: dtype {code} has no numpy equivalent")
    data = np.frombuffer(raw, dtype=np.uint8, count=end - start, offset=start)
    if start % _ITEMSIZE[code]:
        data = data.copy()
    return data.view(names[code]).reshape(shape)
