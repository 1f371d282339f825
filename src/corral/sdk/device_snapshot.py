"""The GPU snapshot: device-to-host copies that overlap the next forward and backward.

For tensors on a GPU, ``save()`` does not wait for their copy. It enqueues each copy into the
pinned host buffers of the :class:`~corral.sdk.staging.StagingPool` (reused from save to save)
and returns; the background writer waits for the copies before it reads the buffers. What may
change a tensor before its copy has finished decides where the copy runs:

* **guarded** tensors (a parameter, or a state tensor such as ``exp_avg``, of an optimizer
  corral knows: every optimizer that has stepped since the hook was installed, which a
  ``Checkpointer`` does at creation on a machine with CUDA, and those given to :func:`watch`
  or :func:`corral.sdk.training_state`) are copied on a side stream, after it
  waits for the work already queued on the current stream. Only ``optimizer.step()`` changes
  them in place, so a global optimizer step pre-hook makes the current stream wait for the
  copies of *that optimizer's* tensors, and only for those whose copy has not finished yet (a
  device-side wait: the host does not block). The forward and backward passes in between run
  while the copies do;
* every other tensor on the device (batch-norm statistics, which the next forward updates in
  place; an EMA; a tensor learning rate) is copied on the current stream, ordered before
  anything queued after ``save()``.

Safety net: the writer compares every guarded tensor's version counter (``Tensor._version``)
with the one at the save once its copy finished; a tensor changed in place before its copy
ended (outside ``optimizer.step()``, e.g. weight clipping after the save) fails the save with a
:class:`~corral.sdk.manifest.CheckpointError` naming it, instead of writing a torn checkpoint
(the earlier checkpoints stay). Changes made through ``.data`` do not bump the version counter:
make those before ``save()``, or after ``ckpt.wait()``.

The hook is wrapped in ``torch._dynamo.disable``: under ``torch.compile`` (a compiled model, or a
compiled ``optimizer.step``) it runs eagerly, at a graph break, before the step's kernels.
With AMP, ``GradScaler.step`` calls ``optimizer.step`` (hook included) or skips it (nothing
changes then). Optimizers that step in place (all of torch's: foreach, fused) are what the
hook orders.

The streams are behind a small :class:`Backend` interface: :class:`CudaBackend` on a GPU, and
in tests a stand-in whose copies finish when the test says (:func:`use_backend`), which runs the
same ordering logic on the CPU.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.sdk.manifest import CheckpointError


class Event(Protocol):
    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class Backend(Protocol):
    """Streams and events of the device that holds the state (CUDA, or a test stand-in)."""

    def is_device(self, tensor: Any) -> bool:
        """Whether ``tensor`` lives on the device (its copy is asynchronous)."""
        ...

    def pinned_empty(self, like: Any) -> Any:
        """A host buffer for a copy of ``like`` (page-locked on a GPU)."""
        ...

    def copy_async(self, dst: Any, src: Any, *, side: bool) -> Event:
        """Enqueue ``dst.copy_(src)`` on the side stream (after the work queued on the current
        stream) or on the current stream; the returned event completes with the copy."""
        ...

    def wait_on_current(self, event: Event, tensor: Any) -> None:
        """Make the current stream of ``tensor``'s device wait for ``event`` (device side)."""
        ...


class CudaBackend:
    """CUDA streams: one side stream per device, reused."""

    def __init__(self) -> None:
        self._side: dict[Any, Any] = {}

    def is_device(self, tensor: Any) -> bool:
        return bool(tensor.device.type == "cuda")

    def pinned_empty(self, like: Any) -> Any:
        torch = sys.modules["torch"]
        return torch.empty(tuple(like.shape), dtype=like.dtype, pin_memory=True)

    def _side_stream(self, device: Any) -> Any:
        stream = self._side.get(device)
        if stream is None:
            stream = self._side[device] = sys.modules["torch"].cuda.Stream(device=device)
        return stream

    def copy_async(self, dst: Any, src: Any, *, side: bool) -> Event:
        cuda = sys.modules["torch"].cuda
        current = cuda.current_stream(src.device)
        stream = self._side_stream(src.device) if side else current
        if side:
            stream.wait_stream(current)  # what was queued before save() comes first
        with cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
            event = cuda.Event()
            event.record(stream)
        if side:
            src.record_stream(stream)  # freed meanwhile: not reused before the copy ends
        return event

    def wait_on_current(self, event: Event, tensor: Any) -> None:
        sys.modules["torch"].cuda.current_stream(tensor.device).wait_event(event)


_backend: Backend = CudaBackend()


def backend() -> Backend:
    return _backend


def use_backend(new: Backend) -> Backend:
    """Put ``new`` in place of the CUDA backend (tests); returns the one it replaces."""
    global _backend
    old, _backend = _backend, new
    return old


def _key(tensor: Any) -> int:
    """What identifies a tensor's memory (views of one parameter share it)."""
    return int(tensor.untyped_storage().data_ptr())


@dataclass(eq=False)
class _Guarded:
    name: str
    src: Any
    version: int
    event: Event
    released_at: int | None = None  # the version when a step pre-hook let the step go


@dataclass
class DeviceCopies:
    """The device copies of one snapshot: :meth:`settle` waits for them and checks them."""

    events: list[Event] = field(default_factory=list)
    guarded: list[tuple[int, _Guarded]] = field(default_factory=list)

    def settle(self) -> None:
        """Wait for every copy; raise :class:`CheckpointError` if a guarded tensor changed in
        place before its copy finished (outside an optimizer step)."""
        torn: list[str] = []
        try:
            for _, g in self.guarded:
                g.event.synchronize()
                now = int(g.src._version)
                with _lock:
                    released = g.released_at
                if now != g.version and released != g.version:
                    torn.append(g.name)
            for event in self.events:
                event.synchronize()
        finally:
            with _lock:
                for key, g in self.guarded:
                    waiting = _pending.get(key)
                    if waiting is not None and g in waiting:
                        waiting.remove(g)
                        if not waiting:
                            del _pending[key]
        if torn:
            more = f" (and {len(torn) - 1} more)" if len(torn) > 1 else ""
            raise CheckpointError(
                f"tensor {torn[0]!r}{more} changed in place while its snapshot was being copied "
                "from the GPU (outside optimizer.step()): not saved, the earlier checkpoints "
                "stay. Change it before save() or after ckpt.wait()"
            )


# --- what the optimizers change ------------------------------------------------------------

_lock = threading.Lock()
_pending: dict[int, list[_Guarded]] = {}  # storage key -> copies to end before a step
_optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
_hook_handle: Any = None


def watch(optimizer: Any) -> None:
    """Guard ``optimizer``'s tensors from the first save on (an optimizer is also known once
    it has stepped). :func:`corral.sdk.training_state` calls it for the optimizer it gets."""
    if optimizer is None or not hasattr(optimizer, "param_groups"):
        return
    _optimizers.add(optimizer)  # the hook itself is installed at the first device snapshot


def _optimizer_tensors(optimizer: Any) -> Iterable[Any]:
    """The tensors a step of ``optimizer`` changes in place (a DTensor's: its local shard)."""
    torch = sys.modules["torch"]
    for group in optimizer.param_groups:
        for p in group["params"]:
            yield getattr(p, "_local_tensor", p)
            state = optimizer.state.get(p)
            if isinstance(state, dict):
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        yield getattr(value, "_local_tensor", value)


def guarded_keys() -> set[int]:
    """The memory that only an optimizer step of a known optimizer changes in place."""
    keys: set[int] = set()
    for optimizer in list(_optimizers):
        for tensor in _optimizer_tensors(optimizer):
            try:
                keys.add(_key(tensor))
            except (RuntimeError, AttributeError):  # no storage (a fake or meta tensor)
                continue
    return keys


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """The global optimizer step pre-hook: the step waits (on the device) for the copies of
    the tensors it is about to change, and only for those not finished yet."""
    _optimizers.add(optimizer)
    if not _pending:
        return None
    with _lock:
        waits = []
        for tensor in _optimizer_tensors(optimizer):
            try:
                copies = _pending.get(_key(tensor), ())
            except (RuntimeError, AttributeError):
                continue
            for g in copies:
                if g.released_at is not None:
                    continue
                g.released_at = int(g.src._version)
                if not g.event.query():
                    waits.append((g.event, tensor))
    for event, tensor in waits:
        _backend.wait_on_current(event, tensor)
    return None


def install_if_cuda() -> None:
    """Install the step pre-hook now when a GPU is there (a Checkpointer does at creation), so
    that every optimizer that steps from then on is known at the first save."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_available():
            _install_hook()
    except Exception:  # no usable CUDA: nothing to guard
        pass


def _install_hook() -> None:
    global _hook_handle
    if _hook_handle is not None:
        return
    torch = sys.modules.get("torch")
    if torch is None:
        return
    import importlib

    hook: Any = _before_step
    try:  # eager, at a graph break, under torch.compile
        hook = importlib.import_module("torch._dynamo").disable(_before_step)
    except (ImportError, AttributeError):  # a torch without dynamo: nothing traces it
        pass

    optim = importlib.import_module("torch.optim.optimizer")
    _hook_handle = optim.register_optimizer_step_pre_hook(hook)


def start(copies: list[tuple[str, Any, Any]]) -> DeviceCopies:
    """Enqueue the copies ``(name, pinned buffer, device tensor)`` of one snapshot."""
    _install_hook()
    guard = guarded_keys()
    out = DeviceCopies()
    for name, dst, src in copies:
        key = _key(src)
        side = key in guard
        event = _backend.copy_async(dst, src, side=side)
        if side:
            g = _Guarded(name, src, int(src._version), event)
            out.guarded.append((key, g))
            with _lock:
                _pending.setdefault(key, []).append(g)
        else:
            out.events.append(event)
    return out
