"""What this machine has, whether a request can ever fit it, and which GPUs are free.

Pure functions over a GPU list and the set of GPU ids held by other instances, so the offer
and allocation rules are testable without processes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from corral.errors import InfeasibleRequest, NoCapacity
from corral.gpu import GpuInfo, describe
from corral.providers.base import Requirements
from corral.wire.env import ENV_FAKE_GPUS


@dataclass(frozen=True)
class Machine:
    """This machine's resources, as offers describe them."""

    gpus: list[GpuInfo]
    cpus: int
    memory_gb: float
    disk_gb: float

    @classmethod
    def probe(cls, gpus: list[GpuInfo], disk_path: Path) -> Machine:
        try:
            disk = shutil.disk_usage(disk_path).total / 2**30
        except OSError:
            disk = 0.0
        return cls(
            gpus=list(gpus),
            cpus=os.cpu_count() or 1,
            memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
            disk_gb=round(disk, 1),
        )


def same_type(name: str, wanted: str) -> bool:
    return name.strip().lower() == wanted.strip().lower()


def types(gpus: list[GpuInfo]) -> list[str]:
    """GPU model names in inventory order, each once."""
    return list(dict.fromkeys(g.name for g in gpus))


def of_type(gpus: list[GpuInfo], gpu_type: str | None) -> list[GpuInfo]:
    return list(gpus) if gpu_type is None else [g for g in gpus if same_type(g.name, gpu_type)]


def choose_type(gpus: list[GpuInfo], req: Requirements) -> str | None:
    """The GPU model an offer for ``req`` uses: the requested one, else the first model with
    enough GPUs, else the first model. None when the request needs no GPU."""
    if max(req.gpu_count_min, req.gpu_count_max) == 0 or not gpus:
        return None
    if req.gpu_type:
        hit = of_type(gpus, req.gpu_type)
        return hit[0].name if hit else None
    for name in types(gpus):
        if len(of_type(gpus, name)) >= req.gpu_count_min:
            return name
    return gpus[0].name


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def check_feasible(machine: Machine, req: Requirements) -> str | None:
    """Raise :class:`InfeasibleRequest` if ``req`` can never fit this machine; else return the
    GPU model to offer (None when no GPU is needed)."""
    if req.spot:
        raise InfeasibleRequest("the local provider has no spot machines")
    gpus, need = machine.gpus, req.gpu_count_min
    if need > 0 and not gpus:
        raise InfeasibleRequest(
            "the job asks for GPUs; this machine has none "
            f"(set {ENV_FAKE_GPUS}=L40S:8 to declare a fake inventory for a demo)"
        )
    gpu_type = choose_type(gpus, req)
    if need > 0 and req.gpu_type and gpu_type is None:
        raise InfeasibleRequest(
            f"the job asks for {req.gpu_type} GPUs; this machine has {', '.join(types(gpus))}"
        )
    have = len(of_type(gpus, gpu_type))
    if need > have:
        which = f"{gpu_type} " if req.gpu_type else ""
        raise InfeasibleRequest(
            f"this machine has {_plural(have, which + 'GPU')} ({describe(gpus)}); "
            f"the job asks for {need}"
        )
    if req.cpus is not None and req.cpus > machine.cpus:
        raise InfeasibleRequest(
            f"the job asks for {req.cpus:g} CPUs; this machine has {machine.cpus}"
        )
    if req.memory_gb is not None and req.memory_gb > machine.memory_gb:
        raise InfeasibleRequest(
            f"the job asks for {req.memory_gb:g} GB of memory; this machine has "
            f"{machine.memory_gb:g} GB"
        )
    if req.disk_gb is not None and machine.disk_gb and req.disk_gb > machine.disk_gb:
        raise InfeasibleRequest(
            f"the job asks for {req.disk_gb:g} GB of disk; this machine has {machine.disk_gb:g} GB"
        )
    return gpu_type if need > 0 or req.gpu_count_max > 0 else None


def offer_count(machine: Machine, req: Requirements, gpu_type: str | None) -> int:
    """``req.gpu_count_max`` clipped to what exists, but at least ``req.gpu_count_min``."""
    if gpu_type is None:
        return 0
    have = len(of_type(machine.gpus, gpu_type))
    return max(req.gpu_count_min, min(max(req.gpu_count_max, req.gpu_count_min), have))


def free_ids(gpus: list[GpuInfo], gpu_type: str | None, held: set[str]) -> list[str]:
    return [g.id for g in of_type(gpus, gpu_type) if g.id not in held]


def allocate(gpus: list[GpuInfo], gpu_type: str | None, count: int, held: set[str]) -> list[str]:
    """Pick ``count`` free GPU ids of ``gpu_type`` (lowest first) or raise
    :class:`NoCapacity` naming how many are held by other runs."""
    if count <= 0:
        return []
    pool = of_type(gpus, gpu_type)
    if count > len(pool):
        kind = f"{gpu_type} GPUs" if gpu_type else "GPUs"
        raise InfeasibleRequest(
            f"the offer asks for {count} {kind}; this machine has {len(pool)} ({describe(gpus)})"
        )
    free = free_ids(gpus, gpu_type, held)
    if len(free) < count:
        busy = len(pool) - len(free)
        raise NoCapacity(
            f"waiting for {count} GPUs: {busy} of {len(pool)} are held by other runs",
            fields={"wanted": count, "held": busy, "total": len(pool)},
        )
    return free[:count]
