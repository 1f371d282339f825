"""Agreement between the ranks of a data-parallel job (torchrun, DDP, accelerate, HF Trainer).

A preemption signal reaches the ranks at slightly different moments. If each rank acted on its
own flag, one could exit at step k while another is already blocked in step k+1's gradient
all-reduce, hanging until the collective times out. :func:`agree_seconds_left` lets every rank
decide at the same step, from the same number.

Everything here works only when the script has already imported torch and initialized a
``torch.distributed`` process group of more than one rank; otherwise the helpers are no-ops
returning the single-process answer (rank 0, world size 1, the local value). corral never
imports torch itself for this.
"""

from __future__ import annotations

import atexit
import math
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "agree_left_and_estimate",
    "agree_left_and_stop",
    "agree_seconds_left",
    "barrier",
    "is_distributed",
    "leave",
    "leave_at_exit",
    "rank",
    "world_size",
]


def _dist() -> Any | None:
    """``torch.distributed`` when the script initialized a group of more than one rank."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        if dist.get_world_size() <= 1:
            return None
    except (RuntimeError, ValueError, AttributeError):
        return None
    return dist


def is_distributed() -> bool:
    """True inside an initialized ``torch.distributed`` group of more than one rank."""
    return _dist() is not None


def rank() -> int:
    """This process's rank in the default group (0 when not distributed)."""
    dist = _dist()
    return 0 if dist is None else int(dist.get_rank())


def world_size() -> int:
    """The number of ranks in the default group (1 when not distributed)."""
    dist = _dist()
    return 1 if dist is None else int(dist.get_world_size())


def _device(dist: Any, torch: Any) -> Any:
    """Where a collective's tensor must live: the current CUDA device for an nccl-only group,
    else the CPU (gloo, mpi, or a mixed ``cpu:gloo,cuda:nccl`` group)."""
    try:
        backend = str(dist.get_backend()).lower()
    except (RuntimeError, ValueError):
        backend = ""
    cpu_capable = any(name in backend for name in ("gloo", "mpi", "cpu:"))
    if "nccl" in backend and not cpu_capable:
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            return torch.device("cuda", cuda.current_device())
    return torch.device("cpu")


def _all_reduce_min(values: Sequence[float]) -> list[float]:
    """Element-wise minimum over all ranks: one all_reduce of a small float64 tensor. Raises
    what torch.distributed raises (RuntimeError) when the collective fails."""
    dist = _dist()
    if dist is None:
        return [float(v) for v in values]
    torch = sys.modules["torch"]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
    tensor = tensor.to(_device(dist, torch))
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return [float(v) for v in tensor.cpu().tolist()]


def agree_seconds_left(local: float | None) -> float | None:
    """The grace time left agreed by all ranks: None when no rank was signalled, else the
    smallest time left on any rank. ``local`` is this rank's (None: no signal here). Every rank
    must call it at the same point (it is one collective)."""
    value = math.inf if local is None else float(local)
    (agreed,) = _all_reduce_min([value])
    return None if agreed == math.inf else agreed


def agree_left_and_stop(local_left: float | None, stop_here: bool) -> tuple[float | None, bool]:
    """One collective for "does the loop end at this step": the agreed grace time left (as
    :func:`agree_seconds_left`) and whether any rank asked to stop (budget, early stopping,
    deadline: :func:`corral.sdk.signals.request_stop`)."""
    left = math.inf if local_left is None else float(local_left)
    agreed_left, agreed_stop = _all_reduce_min([left, -1.0 if stop_here else 0.0])
    return (None if agreed_left == math.inf else agreed_left), agreed_stop < 0


def agree_left_and_estimate(
    local_left: float | None, local_estimate: float | None, *, contributes: bool = True
) -> tuple[float | None, float | None]:
    """One collective for a save decision every rank computes alike: the smallest time left
    (None when no rank gave one) and the largest save-duration estimate among the ranks that
    ``contributes`` and know one (None when none does: unknown, so a save is tried)."""
    left = math.inf if local_left is None else float(local_left)
    known = contributes and local_estimate is not None
    neg_estimate = -float(local_estimate) if known else math.inf  # type: ignore[arg-type]
    agreed_left, agreed_neg = _all_reduce_min([left, neg_estimate])
    return (
        None if agreed_left == math.inf else agreed_left,
        None if agreed_neg == math.inf else -agreed_neg,
    )


def barrier() -> None:
    """Wait for every rank (no-op when not distributed)."""
    dist = _dist()
    if dist is None:
        return
    if _device(dist, sys.modules["torch"]).type == "cuda":
        # nccl's barrier needs to know the device; a tiny all_reduce does the same job.
        _all_reduce_min([0.0])
        return
    dist.barrier()


def leave() -> None:
    """Destroy the default process group before the process exits on its own (best effort):
    exiting with a live gloo group can abort in its threads' destructors, which would turn the
    exit code into a crash (SIGABRT). A no-op once the group is gone."""
    dist = _dist()
    if dist is None:
        return
    try:
        dist.destroy_process_group()
    except Exception as exc:  # exiting anyway: report, never raise
        print(f"corral: could not leave the process group: {exc}", file=sys.stderr)


_leave_registered = False


def leave_at_exit() -> None:
    """Make sure the default process group is destroyed when the interpreter exits (before its
    destructors run), unless the script destroys it first.

    Used on the way out with exit 75: destroying the group right away would make the script's
    own clean-up fail while the ``SystemExit`` unwinds (the usual
    ``finally: dist.destroy_process_group()`` raises on a group that is already gone, turning
    "preempted, resume me" into a crash). Registered once; a no-op when not distributed."""
    global _leave_registered
    if _leave_registered or _dist() is None:
        return
    _leave_registered = True
    atexit.register(leave)  # LIFO: runs before the exit handlers registered at import time
