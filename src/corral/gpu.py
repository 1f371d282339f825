"""GPU inventory of this node: NVML, ``CUDA_VISIBLE_DEVICES``, or a declared fake inventory.

"No GPU" is a normal answer (an empty list), never a crash. ``CORRAL_FAKE_GPUS`` declares an
inventory for tests and demos: ``"L40S:8"`` or ``"L40S:4,A100:2"`` (type:count, comma separated).
A declared inventory wins over NVML and is not filtered by ``CUDA_VISIBLE_DEVICES``.

``CUDA_VISIBLE_DEVICES`` is read the way CUDA reads it: entries are indices (``"2"``) or GPU
UUIDs (``"GPU-8f1c..."``, a unique prefix is enough); an empty value hides every GPU; the list
stops at the first entry that names no GPU (so ``"-1"`` hides every GPU). A GPU picked by UUID
keeps its UUID as ``id``, because indices can be ordered differently by CUDA and NVML.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from corral.errors import BadInput
from corral.wire.env import ENV_FAKE_GPUS


@dataclass(frozen=True)
class GpuInfo:
    index: int  # position in this process's inventory (after CUDA_VISIBLE_DEVICES)
    id: str  # the id to put in CUDA_VISIBLE_DEVICES for this GPU (physical index or UUID)
    name: str  # model, e.g. "L40S"
    memory_mb: int = 0
    fake: bool = False
    uuid: str = ""  # "GPU-..." from NVML; empty for fake GPUs

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GpuUsage:
    id: str
    utilization_pct: float
    memory_used_mb: int
    memory_total_mb: int


def parse_fake(value: str) -> list[GpuInfo]:
    """Parse a declared inventory such as ``"L40S:8"`` or ``"L40S:4,A100:2"``.

    A bare count (``"2"``) declares GPUs of type ``GPU``. Raises :class:`BadInput` naming
    ``CORRAL_FAKE_GPUS`` on a malformed entry.
    """
    gpus: list[GpuInfo] = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, count = part.partition(":")
        if not sep:
            name, count = "GPU", name
        try:
            n = int(count)
        except ValueError:
            raise BadInput(
                f"{ENV_FAKE_GPUS}={value!r}: expected TYPE:COUNT such as 'L40S:8', got {part!r}"
            )
        if n < 0 or not name.strip():
            raise BadInput(f"{ENV_FAKE_GPUS}={value!r}: bad entry {part!r}")
        for _ in range(n):
            i = len(gpus)
            gpus.append(GpuInfo(index=i, id=str(i), name=name.strip(), memory_mb=0, fake=True))
    return gpus


def describe(gpus: list[GpuInfo]) -> str:
    """A short human summary: ``"L40S x4, A100 x2"`` (``"no GPU"`` for an empty list)."""
    if not gpus:
        return "no GPU"
    counts = Counter(g.name for g in gpus)
    return ", ".join(f"{name} x{n}" for name, n in counts.items())


def _short_name(full: str) -> str:
    """'NVIDIA L40S' -> 'L40S', 'NVIDIA A100-SXM4-80GB' -> 'A100'."""
    name = full.replace("NVIDIA", "").replace("Tesla", "").strip()
    for sep in ("-", " "):
        head = name.split(sep)[0]
        if head:
            name = head
    return name or full


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None when there is no library, driver or GPU."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: a normal answer
        return None
    return pynvml


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def _uuid(nvml: Any, handle: Any) -> str:
    try:
        return _text(nvml.nvmlDeviceGetUUID(handle))
    except Exception:  # old drivers: indices still work
        return ""


def _nvml_gpus() -> list[GpuInfo]:
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(nvml.nvmlDeviceGetName(h))
            mem = nvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            out.append(
                GpuInfo(
                    index=i,
                    id=str(i),
                    name=_short_name(name),
                    memory_mb=int(mem),
                    uuid=_uuid(nvml, h),
                )
            )
        return out
    except Exception:
        return []
    finally:
        _shutdown(nvml)


def _match(entry: str, gpus: list[GpuInfo]) -> GpuInfo | None:
    """The GPU a ``CUDA_VISIBLE_DEVICES`` entry names: an index or a (prefix of a) UUID."""
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if entry.upper().startswith("GPU-"):
        hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
        return hits[0] if len(hits) == 1 else None
    return None  # MIG-... and anything else: not a whole GPU we can schedule


def filter_visible(gpus: list[GpuInfo], visible: str | None) -> list[GpuInfo]:
    """Apply a ``CUDA_VISIBLE_DEVICES`` value to the node's GPUs (None: no filtering)."""
    if visible is None:
        return gpus
    picked: list[GpuInfo] = []
    seen: set[int] = set()
    for entry in (v.strip() for v in visible.split(",")):
        g = _match(entry, gpus) if entry else None
        if g is None or g.index in seen:
            break  # CUDA stops at the first invalid (or repeated) entry
        seen.add(g.index)
        gid = g.uuid if entry.upper().startswith("GPU-") else g.id
        picked.append(
            GpuInfo(
                index=len(picked),
                id=gid,
                name=g.name,
                memory_mb=g.memory_mb,
                fake=g.fake,
                uuid=g.uuid,
            )
        )
    return picked


def detect(environ: Mapping[str, str] | None = None) -> list[GpuInfo]:
    """The GPUs this process may use: the fake inventory if declared, else NVML filtered by
    ``CUDA_VISIBLE_DEVICES`` (an empty value hides every GPU)."""
    env = os.environ if environ is None else environ
    fake = env.get(ENV_FAKE_GPUS)
    if fake is not None and fake.strip():
        return parse_fake(fake)
    return filter_visible(_nvml_gpus(), env.get("CUDA_VISIBLE_DEVICES"))


def usage(ids: list[str] | None = None, environ: Mapping[str, str] | None = None) -> list[GpuUsage]:
    """Current utilisation per GPU (fake GPUs report zero). Never raises.

    ``ids`` selects GPUs by physical index or UUID; each result carries the id it was asked by.
    """
    env = os.environ if environ is None else environ
    fake = env.get(ENV_FAKE_GPUS)
    if fake is not None and fake.strip():
        try:
            declared = parse_fake(fake)
        except BadInput:
            return []
        return [
            GpuUsage(id=g.id, utilization_pct=0.0, memory_used_mb=0, memory_total_mb=0)
            for g in declared
            if ids is None or g.id in ids
        ]
    nvml = _nvml()
    if nvml is None:
        return []
    out = []
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            gid = str(i)
            if ids is not None and gid not in ids:
                uuid = _uuid(nvml, h)
                if not uuid or uuid not in ids:
                    continue
                gid = uuid
            util = nvml.nvmlDeviceGetUtilizationRates(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            out.append(
                GpuUsage(
                    id=gid,
                    utilization_pct=float(util.gpu),
                    memory_used_mb=int(mem.used // 2**20),
                    memory_total_mb=int(mem.total // 2**20),
                )
            )
    except Exception:
        pass
    finally:
        _shutdown(nvml)
    return out
