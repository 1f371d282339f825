"""Turning a training state into checkpoint files and back.

A state (any picklable object, usually a dict) becomes these files:

* ``tensors-00000.safetensors``, ``tensors-00001...``: every torch tensor and numpy array in the
  state, in files of about 128 MiB in the safetensors format (an 8-byte header length, a JSON
  header, then the raw bytes), written by corral itself so it can stream large sequential
  writes and hash while writing. Readable by the ``safetensors`` library too (tensor names are
  the dotted paths in the state). No pickle involved.
* ``state.pkl``: everything else, pickled, with each tensor/array replaced by a reference into
  the tensors file (pickle's persistent ids), so the structure of the state is kept exactly.

Trust model: ``state.pkl`` is a pickle, and unpickling runs code chosen by whoever wrote the file.
Only restore checkpoints you (your own jobs) wrote; the sha256 manifest detects corruption, not a
malicious writer.

Tensors in an unsupported layout or dtype (sparse, quantized, complex128, tensor subclasses,
object arrays, ...) are pickled with the rest. Dtypes torch's own pickle cannot load back
(complex32, the fnuz/e8m0 float8s, float4, bits and sub-byte ints) go to the tensors file as
integers of their width and are viewed back as their dtype on restore. Tensors are restored as separate tensors: storage
shared between two tensors (views) is not kept shared, like safetensors. ``torch`` is imported
only when the state holds torch tensors.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import io
import json
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from corral.sdk import sharded
from corral.sdk.device_snapshot import DeviceCopies
from corral.sdk.manifest import CheckpointError, FileEntry
from corral.sdk.staging import StagingPool
from corral.sdk.storage import CHUNK_BYTES, Storage

#: Tensors go to files of about this many bytes (``tensors-00000.safetensors``, ...).
SHARD_BYTES = 128 * 1024 * 1024
#: Threads writing tensor files at once.
WRITE_THREADS = min(4, max(2, os.cpu_count() or 1))
STATE_FILE = "state.pkl"

_TORCH_CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "complex64": "C64",
}
_NUMPY_CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
    "complex64": "C64",
}


@dataclass
class _Entry:
    name: str
    kind: str  # "torch" or "numpy"
    code: str  # safetensors dtype code
    shape: tuple[int, ...]
    data: Any  # a contiguous CPU tensor / array holding the bytes to write
    itemsize: int
    nbytes: int


@dataclass
class Snapshot:
    """A state captured at save time: its pickled skeleton and the tensor payloads. A state
    holding DTensors is ``sharded``: ``chunks`` describes each DTensor (global shape, dtype,
    and this rank's chunk when it writes one; see :mod:`corral.sdk.sharded`)."""

    skeleton: bytes
    entries: list[_Entry] = field(default_factory=list)
    sharded: bool = False
    chunks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: copies from a GPU still running (the writer settles them before reading the buffers)
    pending: DeviceCopies | None = None

    @property
    def nbytes(self) -> int:
        return len(self.skeleton) + sum(e.nbytes for e in self.entries)


def _tensor_code(obj: Any) -> tuple[str, str] | None:
    """(kind, safetensors code) when ``obj`` goes to the tensors file, else None (pickled)."""
    torch = sys.modules.get("torch")
    if torch is not None and type(obj) in (torch.Tensor, torch.nn.Parameter):
        if (
            obj.layout != torch.strided
            or obj.is_quantized
            or obj.is_nested
            or obj.device.type == "meta"
        ):
            return None
        code = _TORCH_CODES.get(str(obj.dtype).removeprefix("torch."))
        return ("torch", code) if code else None
    np = sys.modules.get("numpy")
    if np is not None and type(obj) is np.ndarray:
        if obj.dtype.byteorder == ">" or (obj.dtype.byteorder == "=" and sys.byteorder != "little"):
            return None
        code = _NUMPY_CODES.get(obj.dtype.name) if obj.dtype.fields is None else None
        return ("numpy", code) if code else None
    return None


#: Types that are never a tensor (exact types: a subclass may be anything).
_PLAIN_TYPES = frozenset({str, int, float, bool, type(None), bytes, tuple, list, dict, set})
#: Integer dtypes of each element width: a tensor of a dtype without a safetensors code whose
#: pickle torch cannot load back is saved as a view of these (see :func:`as_dtype`).
_WIDTH_INTS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _bits_view(obj: Any) -> Any:
    """For a plain torch tensor whose dtype neither has a safetensors code nor survives torch's
    own pickle: ``obj`` viewed as integers of its element width (no copy), else None."""
    torch = sys.modules.get("torch")
    if torch is None or type(obj) not in (torch.Tensor, torch.nn.Parameter):
        return None
    name = str(obj.dtype).removeprefix("torch.")
    if name in _TORCH_CODES or (obj.dtype.is_complex and obj.element_size() > 4):
        return None  # a code of its own, or complex128 (which torch pickles fine)
    ints = _WIDTH_INTS.get(obj.element_size())
    if ints is None or obj.layout != torch.strided or obj.is_quantized or obj.is_nested:
        return None
    if obj.device.type == "meta":
        return None
    src = obj.detach()
    if src.is_conj():
        src = src.resolve_conj()
    return src.view(getattr(torch, ints))


def as_dtype(bits: Any, dtype: str, is_param: bool, requires_grad: bool) -> Any:
    """The inverse of :func:`_bits_view` at load time (named in ``state.pkl``: keep it here)."""
    torch = sys.modules["torch"]
    obj = bits.view(getattr(torch, dtype))
    if is_param:
        return torch.nn.Parameter(obj, requires_grad=requires_grad)
    return obj.requires_grad_(True) if requires_grad else obj


def _collect_names(state: Any) -> dict[int, str]:
    """Dotted paths of the tensors reachable through dicts, lists and tuples (for readability)."""
    names: dict[int, str] = {}
    used: set[str] = set()

    def walk(obj: Any, path: str, depth: int) -> None:
        if depth > 12:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k), depth + 1)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}.{i}" if path else str(i), depth + 1)
        elif id(obj) not in names and (
            _tensor_code(obj) is not None or _bits_view(obj) is not None or sharded.is_dtensor(obj)
        ):
            name = path or "tensor"
            while name in used or name == "__metadata__":
                name += "#"
            used.add(name)
            names[id(obj)] = name

    walk(state, "", 0)
    return names


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, pid: Any, reduce: Any):
        super().__init__(file, protocol=5)
        self._pid = pid
        self._reduce = reduce

    def persistent_id(self, obj: Any) -> Any:
        return self._pid(obj)

    def reducer_override(self, obj: Any) -> Any:
        return self._reduce(obj)


def snapshot(state: Any, pool: StagingPool | None) -> Snapshot:
    """Capture ``state`` now. With a ``pool`` tensors are copied (the caller may then change
    them); without one the snapshot refers to the live tensors (for a synchronous write)."""
    names = _collect_names(state)
    taken = set(names.values())
    entries: list[_Entry] = []
    seen: dict[int, tuple[Any, ...]] = {}
    keep_alive: list[Any] = []
    cuda_devices: set[Any] = set()  # asynchronous copies from each must finish before return
    chunks: dict[str, dict[str, Any]] = {}
    dtensor = sharded.dtensor_type()

    def take_dtensor(obj: Any) -> Any:
        torch = sys.modules["torch"]
        dtype = str(obj.dtype).removeprefix("torch.")
        code = _TORCH_CODES.get(dtype)
        name = names.get(id(obj)) or f"_unnamed.dtensor.{len(chunks)}"
        if code is None:
            raise CheckpointError(f"the state cannot be saved: DTensor {name!r} has dtype {dtype}")
        local, offsets, sizes = sharded.local_chunk(obj)
        info: dict[str, Any] = {"shape": list(obj.shape), "dtype": dtype}
        if local is not None:
            src = local.detach().resolve_conj().resolve_neg()
            if src.device.type == "cuda":
                cuda_devices.add(src.device)
            if pool is not None:
                data = pool.take(len(entries), src, "torch", name)
            else:
                data = src.to("cpu").contiguous()
            entries.append(_Entry(name, "torch", code, sizes, data, data.element_size(),
                                  data.nbytes))  # fmt: skip
            info.update(offsets=list(offsets), sizes=list(sizes))
        chunks[name] = info
        keep_alive.append(obj)
        flags = (isinstance(obj, torch.nn.Parameter), bool(obj.requires_grad))
        pid = ("corral", "dtensor", name, *flags)
        seen[id(obj)] = pid
        return pid

    def persistent_id(obj: Any) -> Any:
        if type(obj) in _PLAIN_TYPES:  # called for every object: the common case first
            return None
        pid = seen.get(id(obj))
        if pid is not None:
            return pid
        if dtensor is not None and isinstance(obj, dtensor):
            return take_dtensor(obj)
        found = _tensor_code(obj)
        if found is None:
            return None
        kind, code = found
        if kind == "torch":
            src = obj.detach().resolve_conj().resolve_neg()
            # _tensor_code admits exactly Tensor and Parameter; a type check is much cheaper than
            # isinstance(obj, Parameter) (its metaclass hook), which shows with 10,000 tensors
            flags = (type(obj) is not sys.modules["torch"].Tensor, bool(obj.requires_grad))
            if src.device.type == "cuda":
                cuda_devices.add(src.device)
            if pool is not None:
                data = pool.take(len(entries), src, kind, names.get(id(obj), ""))
            else:
                data = src.to("cpu").contiguous()
            itemsize = data.element_size()
        else:
            flags = (False, False)
            if pool is not None:
                data = pool.take(len(entries), obj, kind)
            else:
                data = sys.modules["numpy"].ascontiguousarray(obj)
            itemsize = data.itemsize
        name = names.get(id(obj))
        if name is None:  # not reachable through dicts/lists/tuples: never a name in use
            name = f"_unnamed.{len(entries)}"
            while name in taken:
                name += "#"
            taken.add(name)
        entries.append(_Entry(name, kind, code, tuple(obj.shape), data, itemsize, data.nbytes))
        keep_alive.append(obj)  # ids stay unique while pickling
        pid = ("corral", kind, name, *flags)
        seen[id(obj)] = pid
        return pid

    def reduce(obj: Any) -> Any:
        bits = _bits_view(obj)
        if bits is None:
            return NotImplemented
        keep_alive.append(bits)
        name = names.pop(id(obj), None)
        if name is not None:  # the dotted path names the integers in the tensors file
            names[id(bits)] = name
        torch = sys.modules["torch"]
        flags = (isinstance(obj, torch.nn.Parameter), bool(obj.requires_grad))
        return as_dtype, (bits, str(obj.dtype).removeprefix("torch."), *flags)

    buf = io.BytesIO()
    pickler = _Pickler(buf, persistent_id, reduce)
    collecting = gc.isenabled()
    gc.disable()  # the cyclic GC would walk the whole state again and again (a third of the stall)
    try:
        pickler.dump(state)
    except BaseException as exc:
        if pool is not None:
            pool.abandon()
        if isinstance(exc, (pickle.PicklingError, TypeError, AttributeError)):
            raise CheckpointError(f"the state cannot be saved: {exc}") from exc
        raise
    finally:
        if collecting:
            gc.enable()
    pending = None
    if pool is not None:
        pending = pool.finish(len(entries))  # device copies: started, settled by the writer
    else:
        for device in cuda_devices:  # synchronize() alone waits for the current device only
            sys.modules["torch"].cuda.synchronize(device)
    return Snapshot(buf.getvalue(), entries, sharded=bool(chunks), chunks=chunks, pending=pending)


def _byte_view(entry: _Entry) -> memoryview:
    data = entry.data
    if entry.kind == "torch":
        torch = sys.modules["torch"]
        return memoryview(data.reshape(-1).view(torch.uint8).numpy())
    return memoryview(data.reshape(-1).view("uint8"))


def _shard(entries: list[_Entry]) -> list[list[_Entry]]:
    """Split into files of about ``SHARD_BYTES`` (a bigger tensor gets a file of its own).

    Larger elements come first: every tensor then starts at a multiple of its element size (the
    format allows no gaps), so restore can view the bytes in place without copying. Several
    files let writing and sha256 checking use several cores.
    """
    shards: list[list[_Entry]] = [[]]
    size = 0
    for e in sorted(entries, key=lambda e: -e.itemsize):
        if shards[-1] and size + e.nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    return shards


def _header(entries: list[_Entry]) -> bytes:
    header: dict[str, Any] = {
        "__metadata__": {
            "format": "pt" if any(e.kind == "torch" for e in entries) else "np",
            "writer": "corral",
        }
    }
    offset = 0
    for e in entries:
        header[e.name] = {
            "dtype": e.code,
            "shape": list(e.shape),
            "data_offsets": [offset, offset + e.nbytes],
        }
        offset += e.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text


def _write_file(storage: Storage, path: str, pieces: Iterator[memoryview | bytes]) -> FileEntry:
    """Write ``pieces`` to ``path`` hashing as they go (no second read); one fsync at close."""
    digest = hashlib.sha256()
    size = 0
    writer = storage.open_write(path)
    try:
        for piece in pieces:
            view = memoryview(piece).cast("B")
            for start in range(0, len(view), CHUNK_BYTES):
                chunk = view[start : start + CHUNK_BYTES]
                digest.update(chunk)
                writer.write(chunk)
            size += len(view)
    except BaseException:
        abort = getattr(writer, "abort", writer.close)
        try:
            abort()
        except OSError:
            pass
        raise
    writer.close()
    return FileEntry(size=size, sha256=digest.hexdigest())


def _shard_pieces(entries: list[_Entry]) -> Iterator[memoryview | bytes]:
    yield _header(entries)
    for e in entries:
        if e.nbytes:
            yield _byte_view(e)


def write_snapshot(
    snap: Snapshot, storage: Storage, directory: str, prefix: str = ""
) -> dict[str, FileEntry]:
    """Write the snapshot's files into ``directory``, their names starting with ``prefix``
    (a rank's files in a sharded checkpoint, see :mod:`corral.sdk.sharded`); returns their
    sizes and sha256s. A sharded snapshot also writes its chunk index.

    Tensor files are written by up to ``WRITE_THREADS`` threads at once (hashing and
    ``write`` release the GIL), each file with one fsync.
    """
    if snap.pending is not None:
        pending, snap.pending = snap.pending, None
        pending.settle()  # the copies from the GPU have finished, and nothing tore them
    state_file = prefix + STATE_FILE
    jobs: dict[str, Callable[[], FileEntry]] = {
        state_file: lambda: _write_file(
            storage, storage.join(directory, state_file), iter([snap.skeleton])
        )
    }
    where: dict[str, str] = {}  # entry name -> its tensor file
    if snap.entries:
        for index, shard in enumerate(_shard(snap.entries)):
            name = prefix + tensor_file_name(index)
            path = storage.join(directory, name)
            where.update((e.name, name) for e in shard)
            # a generator: its pieces are made as the job writes them
            jobs[name] = functools.partial(_write_file, storage, path, _shard_pieces(shard))
    if snap.sharded:
        index_file = prefix + sharded.INDEX_FILE
        raw = sharded.index_bytes(snap.chunks, where)
        jobs[index_file] = lambda: _write_file(
            storage, storage.join(directory, index_file), iter([raw])
        )
    if len(jobs) <= 2:
        return {name: job() for name, job in jobs.items()}
    return run_jobs(jobs, WRITE_THREADS, "corral-write")


_T = TypeVar("_T")


def run_jobs(jobs: dict[str, Callable[[], _T]], threads: int, name: str) -> dict[str, _T]:
    """Run ``jobs`` on up to ``threads`` threads; their results by key. Every job runs; the
    first failure in key order is raised.

    Plain threads, not a ``ThreadPoolExecutor``: an executor refuses new work once the
    interpreter has begun to exit, which is exactly when a pending save is flushed (atexit).
    """
    keys = iter(list(jobs))
    lock = threading.Lock()
    results: dict[str, _T] = {}
    errors: dict[str, BaseException] = {}

    def work() -> None:
        while True:
            with lock:
                key = next(keys, None)
            if key is None:
                return
            try:
                results[key] = jobs[key]()
            except BaseException as exc:
                errors[key] = exc

    started = []
    for i in range(threads - 1):  # and this thread
        worker = threading.Thread(target=work, name=f"{name}-{i}", daemon=True)
        try:
            worker.start()
        except RuntimeError:  # no new threads at interpreter shutdown: this one does it all
            break
        started.append(worker)
    work()
    for worker in started:
        worker.join()
    for key in jobs:
        if key in errors:
            raise errors[key]
    return {key: results[key] for key in jobs}


def tensor_file_name(index: int) -> str:
    return f"tensors-{index:05d}.safetensors"


def is_tensor_file(name: str) -> bool:
    """``tensors-<n>.safetensors``, also with a rank's prefix (``r00003-tensors-...``)."""
    if sharded.rank_of(name) is not None:
        name = name[7:]
    return name.startswith("tensors-") and name.endswith(".safetensors")
