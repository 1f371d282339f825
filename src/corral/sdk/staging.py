"""Snapshot buffers: where an asynchronous save copies the state before ``save()`` returns.

The copy is the whole training-loop stall of an asynchronous save, so it is made as cheap as
memory allows: buffers are allocated once and reused (no page faults after the first save), and
contiguous CPU tensors/arrays are copied in 16 MiB chunks by a few threads, with streaming
(non-temporal) stores where the optional ``corral.sdk._fastcopy`` extension was built (64-byte
AVX-512 stores where the CPU has them, else 16-byte SSE2 stores: :data:`COPY_ISA`): they skip
reading every destination line into the cache first and leave the training loop's working set
in the cache. Without the extension (no C compiler at install time) the copy is
``ctypes.memmove``. :data:`COPY_KIND` says which one this process uses.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from corral.sdk import device_snapshot
from corral.wire.env import ENV_FAST_COPY

try:
    from corral.sdk._fastcopy import ISA as _FAST_ISA
    from corral.sdk._fastcopy import KIND as _FAST_KIND
    from corral.sdk._fastcopy import copy as _fast_copy
except ImportError:  # built without a C compiler: the portable copy
    _FAST_ISA, _FAST_KIND, _fast_copy = None, None, None


class StagingPool:
    """CPU buffers reused from one asynchronous save to the next.

    Copying into memory that is already mapped runs at memory bandwidth; fresh allocations pay a
    page fault per 4 KiB first. The pool holds one copy of the last saved state's tensors.
    Buffers are reused only once the previous save is durable (one save in flight at a time).
    Contiguous CPU sources are copied in parallel chunks (:meth:`finish`, :data:`COPY_KIND`);
    other sources (CUDA or any other device, strided) by ``Tensor.copy_`` / ``numpy.copyto``.
    """

    def __init__(self) -> None:
        self._slots: list[Any] = []
        self._copies: list[tuple[int, int, int]] = []  # (dst, src, bytes), done by finish()
        self._sources: list[Any] = []  # keeps the sources alive until finish()
        self._device: list[tuple[str, Any, Any]] = []  # (name, pinned buffer, device tensor)
        self._pinned: set[int] = set()  # ids of the buffers made for device tensors
        #: True while :meth:`Checkpointer.reserve` walks a state: allocate, copy nothing.
        self.reserving = False

    def take(self, index: int, src: Any, kind: str, name: str = "") -> Any:
        buf = self._slots[index] if index < len(self._slots) else None
        if self.reserving:
            buf = self._allocate(buf, src, kind)
        elif kind == "torch":
            buf = self._take_torch(buf, src, name)
        else:
            buf = self._take_numpy(buf, src)
        if index < len(self._slots):
            self._slots[index] = buf
        else:
            self._slots.append(buf)
        return buf

    def _allocate(self, buf: Any, src: Any, kind: str) -> Any:
        """A buffer for ``src``: ``buf`` when it fits, else a new one (pages not touched)."""
        if kind == "torch":
            torch = sys.modules["torch"]
            pin = device_snapshot.backend().is_device(src)
            fits = (
                isinstance(buf, torch.Tensor)
                and buf.dtype == src.dtype
                and tuple(buf.shape) == tuple(src.shape)
                and (not pin or id(buf) in self._pinned)
            )
            if not fits:
                self._pinned.discard(id(buf))
                if pin:  # page-locked: the device copies into it asynchronously
                    buf = device_snapshot.backend().pinned_empty(src)
                    self._pinned.add(id(buf))
                else:
                    buf = torch.empty(tuple(src.shape), dtype=src.dtype)
            return buf
        np = sys.modules["numpy"]
        fits = isinstance(buf, np.ndarray) and buf.dtype == src.dtype and buf.shape == src.shape
        return buf if fits else np.empty(src.shape, dtype=src.dtype)

    def _take_torch(self, buf: Any, src: Any, name: str) -> Any:
        buf = self._allocate(buf, src, "torch")
        if device_snapshot.backend().is_device(src):  # started by finish(), not waited for
            self._device.append((name, buf, src))
        elif src.device.type == "cpu" and src.is_contiguous():  # a host address to copy from
            self._defer(buf.data_ptr(), src.data_ptr(), buf.nbytes, src)
        else:
            buf.copy_(src)
        return buf

    def _take_numpy(self, buf: Any, src: Any) -> Any:
        buf = self._allocate(buf, src, "numpy")
        if src.flags.c_contiguous:
            self._defer(buf.ctypes.data, src.ctypes.data, buf.nbytes, src)
        else:
            sys.modules["numpy"].copyto(buf, src)
        return buf

    def prefault(self) -> None:
        """Touch every page of the CPU buffers (writing zeros), so that the next snapshot copies
        into mapped memory instead of paying a page fault per 4 KiB. Pinned buffers are mapped
        already."""
        torch = sys.modules.get("torch")
        for buf in list(self._slots):
            if torch is not None and isinstance(buf, torch.Tensor):
                if id(buf) in self._pinned or not buf.nbytes:
                    continue
                ctypes.memset(buf.data_ptr(), 0, buf.nbytes)
            elif buf.nbytes:
                ctypes.memset(buf.ctypes.data, 0, buf.nbytes)

    def _defer(self, dst: int, src: int, nbytes: int, keep: Any) -> None:
        for start in range(0, nbytes, COPY_CHUNK_BYTES):
            self._copies.append((dst + start, src + start, min(COPY_CHUNK_BYTES, nbytes - start)))
        self._sources.append(keep)

    def abandon(self) -> None:
        """Forget the deferred copies (the snapshot failed)."""
        self._copies.clear()
        self._sources.clear()
        self._device.clear()

    def finish(self, used: int) -> device_snapshot.DeviceCopies | None:
        """Run the deferred copies (several threads: ``memmove`` releases the GIL); drop the
        buffers beyond ``used``. The copies from a device are started, not waited for: the
        returned handle's ``settle()`` waits for them (see :mod:`corral.sdk.device_snapshot`)."""
        device, self._device = self._device, []
        pending = device_snapshot.start(device) if device else None
        self._finish_host(used)
        return pending

    def _finish_host(self, used: int) -> None:
        copies, self._copies = self._copies, []
        batch = _Batch(copy_function())
        try:
            total = sum(n for _, _, n in copies)
            futures = []
            if total >= PARALLEL_COPY_BYTES and COPY_THREADS >= 2:
                executor = _copy_executor()
                try:
                    for job in copies:
                        futures.append(executor.submit(batch.run, *job))
                except RuntimeError:  # no new work once the interpreter is exiting (a save
                    pass  # from an atexit handler): the rest is copied in this thread
            for dst, src, n in copies[len(futures) :]:
                batch.run(dst, src, n)
            for future in futures:
                future.result()
        except BaseException:
            batch.settle()  # Ctrl-C: no copy may still read a source or write a buffer
            raise
        finally:
            self._sources.clear()
        for buf in self._slots[used:]:
            self._pinned.discard(id(buf))
        del self._slots[used:]


#: Snapshot copies: chunk size and threads (for states of at least PARALLEL_COPY_BYTES).
COPY_CHUNK_BYTES = 16 * 1024 * 1024
COPY_THREADS = min(4, os.cpu_count() or 1)
PARALLEL_COPY_BYTES = 64 * 1024 * 1024
#: How snapshots are copied: "streaming" (non-temporal stores), "memcpy" (the extension on a CPU
#: without streaming stores) or "memmove" (no extension; set CORRAL_FAST_COPY=0 to force it).
COPY_KIND = (
    _FAST_KIND if _fast_copy is not None and os.environ.get(ENV_FAST_COPY) != "0" else "memmove"
)
#: The streaming stores in use ("avx512": 64-byte, "sse2": 16-byte), None without streaming.
COPY_ISA = _FAST_ISA if COPY_KIND == "streaming" else None
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def copy_function(kind: str | None = None) -> Any:
    """``copy(dst_address, src_address, nbytes)`` for ``kind`` (default :data:`COPY_KIND`)."""
    kind = kind or COPY_KIND
    if kind == "memmove":
        return ctypes.memmove
    if _fast_copy is None or kind != _FAST_KIND:
        raise ValueError(f"snapshot copy {kind!r} is not available here (have: {COPY_KIND!r})")
    return _fast_copy


class _Batch:
    """The copies of one snapshot, cancellable: after :meth:`settle` no copy of it is running
    and none starts (a Ctrl-C can land anywhere, even between queueing a copy and getting its
    future back, so this counts the copies themselves)."""

    def __init__(self, copy: Any):
        self._copy = copy
        self._cancelled = False
        self._active = 0
        self._cond = threading.Condition()

    def run(self, dst: int, src: int, nbytes: int) -> None:
        with self._cond:
            if self._cancelled:
                return
            self._active += 1
        try:
            self._copy(dst, src, nbytes)
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def settle(self) -> None:
        """Stop the copies not started; wait for the running ones (one chunk each, so
        milliseconds), also through a second Ctrl-C: the sources may be freed right after."""
        while True:
            try:
                with self._cond:
                    self._cancelled = True
                    while self._active:
                        self._cond.wait()
                return
            except KeyboardInterrupt:
                continue


def _copy_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="corral-copy")
        return _executor
