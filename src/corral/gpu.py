"""GPU inventory of this node: NVML, ``CUDA_VISIBLE_DEVICES``, or a declared fake inventory.

"No GPU" is a normal answer (an empty list), never a crash. ``CORRAL_FAKE_GPUS`` declares an
inventory for tests and demos: ``"L40S:8"`` or ``"L40S:4,A100:2"`` (type:count, comma separated).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from corral.constants import ENV_FAKE_GPUS
from corral.errors import BadInput


@dataclass(frozen=True)
class GpuInfo:
    index: int  # position in this node's inventory (what CUDA_VISIBLE_DEVICES names)
    id: str  # the id to put in CUDA_VISIBLE_DEVICES for this GPU
    name: str  # model, e.g. "L40S"
    memory_mb: int = 0
    fake: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GpuUsage:
    id: str
    utilization_pct: float
    memory_used_mb: int
    memory_total_mb: int


def parse_fake(value: str) -> list[GpuInfo]:
    """Parse a declared inventory such as ``"L40S:8"`` or ``"L40S:4,A100:2"``."""
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


def _short_name(full: str) -> str:
    """'NVIDIA L40S' -> 'L40S', 'NVIDIA A100-SXM4-80GB' -> 'A100'."""
    name = full.replace("NVIDIA", "").replace("Tesla", "").strip()
    for sep in ("-", " "):
        head = name.split(sep)[0]
        if head:
            name = head
    return name or full


def _nvml_gpus() -> list[GpuInfo]:
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: a normal answer
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode()
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            out.append(GpuInfo(index=i, id=str(i), name=_short_name(name), memory_mb=int(mem)))
        return out
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def detect(environ: dict[str, str] | None = None) -> list[GpuInfo]:
    """The GPUs this process may use: the fake inventory if declared, else NVML filtered by
    ``CUDA_VISIBLE_DEVICES`` (an empty value hides every GPU)."""
    env = os.environ if environ is None else environ
    fake = env.get(ENV_FAKE_GPUS)
    if fake is not None and fake.strip():
        return parse_fake(fake)
    gpus = _nvml_gpus()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    by_index = {str(g.index): g for g in gpus}
    picked = []
    for w in wanted:
        if w in by_index:
            g = by_index[w]
            picked.append(GpuInfo(index=len(picked), id=g.id, name=g.name, memory_mb=g.memory_mb))
    return picked


def usage(ids: list[str] | None = None, environ: dict[str, str] | None = None) -> list[GpuUsage]:
    """Current utilisation per GPU (fake GPUs report zero). Never raises."""
    env = os.environ if environ is None else environ
    if env.get(ENV_FAKE_GPUS):
        return [
            GpuUsage(id=g.id, utilization_pct=0.0, memory_used_mb=0, memory_total_mb=0)
            for g in parse_fake(env[ENV_FAKE_GPUS])
            if ids is None or g.id in ids
        ]
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            if ids is not None and str(i) not in ids:
                continue
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append(
                GpuUsage(
                    id=str(i),
                    utilization_pct=float(util.gpu),
                    memory_used_mb=int(mem.used // 2**20),
                    memory_total_mb=int(mem.total // 2**20),
                )
            )
    except Exception:
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out
