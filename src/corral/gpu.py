"""GPU inventory of this node: NVML, ``CUDA_VISIBLE_DEVICES``, or a declared fake inventory.

"No GPU" is a normal answer (an empty list), never a crash. ``CORRAL_FAKE_GPUS`` declares an
inventory for tests and demos: ``"L40S:8"`` or ``"L40S:4,A100:2"`` (type:count, comma separated),
or the path of a JSON file (a value ending in ``.json``) that also declares what each GPU reads
(memory, utilisation, temperature, processes, ECC errors; see :class:`FakeGpu`), read again on
every sample so that a test or a demo can change the readings while a run goes on.
A declared inventory wins over NVML and is not filtered by ``CUDA_VISIBLE_DEVICES``.

``CUDA_VISIBLE_DEVICES`` is read the way CUDA reads it: entries are indices (``"2"``) or GPU
UUIDs (``"GPU-8f1c..."``, a unique prefix is enough); an empty value hides every GPU; the list
stops at the first entry that names no GPU (so ``"-1"`` hides every GPU). A GPU picked by UUID
keeps its UUID as ``id``, because indices can be ordered differently by CUDA and NVML.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


@dataclass(frozen=True)
class GpuSample:
    """What one GPU reads now (``GET /gpus`` of an agent, the server's GPU monitoring). A value
    the driver does not report is None: temperature on a virtual GPU, ECC counts on a card
    without ECC, the process list under some containers."""

    index: int
    id: str
    name: str
    uuid: str
    memory_used_mb: int
    memory_total_mb: int
    utilization_pct: float
    temperature_c: float | None
    processes: int | None
    ecc_uncorrected: int | None  # volatile (since the driver loaded) uncorrected ECC errors
    ecc_corrected: int | None
    fake: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FakeGpu(BaseModel):
    """One GPU of a declared inventory file: ``{"gpus": [{"name": "H100", ...}, ...]}`` (or a
    bare list). Only ``name`` is needed; readings default to an idle, cool GPU."""

    # built on first use: only a declared inventory file needs it
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(min_length=1)
    uuid: str = ""
    memory_total_mb: int = Field(default=0, ge=0)
    memory_used_mb: int = Field(default=0, ge=0)
    utilization_pct: float = Field(default=0.0, ge=0, le=100)
    temperature_c: float | None = None
    processes: int | None = Field(default=0, ge=0)
    ecc_uncorrected: int | None = Field(default=None, ge=0)
    ecc_corrected: int | None = Field(default=None, ge=0)


def is_fake_file(value: str) -> bool:
    """Whether a ``CORRAL_FAKE_GPUS`` value names a JSON file rather than ``TYPE:COUNT``s."""
    return value.strip().lower().endswith(".json")


def read_fake_file(value: str) -> list[FakeGpu]:
    """The GPUs a declared inventory file lists; :class:`BadInput` naming the variable, the
    file and the field when it cannot be read or does not fit :class:`FakeGpu`."""
    path = Path(value.strip()).expanduser()
    where = f"{ENV_FAKE_GPUS}={value.strip()}"
    try:
        raw = json.loads(path.read_text())
    except OSError as e:
        raise BadInput(f"{where}: cannot read the file ({e.strerror or e})")
    except ValueError as e:
        raise BadInput(f"{where}: not JSON ({e})")
    rows = raw.get("gpus") if isinstance(raw, dict) else raw
    if not isinstance(rows, list):
        raise BadInput(f'{where}: expected {{"gpus": [...]}} or a list of GPUs')
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(FakeGpu.model_validate(row))
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise BadInput(f"{where}: gpus[{i}].{field}: {first['msg']}") from None
    return out


def _fake_infos(fakes: list[FakeGpu]) -> list[GpuInfo]:
    return [
        GpuInfo(
            index=i, id=str(i), name=g.name, memory_mb=g.memory_total_mb, fake=True, uuid=g.uuid
        )
        for i, g in enumerate(fakes)
    ]


def parse_fake(value: str) -> list[GpuInfo]:
    """Parse a declared inventory such as ``"L40S:8"`` or ``"L40S:4,A100:2"``, or read the
    JSON file a value ending in ``.json`` names (:func:`read_fake_file`).

    A bare count (``"2"``) declares GPUs of type ``GPU``. Raises :class:`BadInput` naming
    ``CORRAL_FAKE_GPUS`` on a malformed entry.
    """
    if is_fake_file(value):
        return _fake_infos(read_fake_file(value))
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


#: what an NVIDIA driver puts on a Linux machine or container (``/dev/dxg``: WSL2); with none
#: of them NVML cannot find a GPU, and importing it (about 15 ms) is skipped
DRIVER_PATHS: tuple[str, ...] = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def _no_driver() -> bool:
    """Linux without any trace of an NVIDIA driver (elsewhere NVML is always asked)."""
    if not sys.platform.startswith("linux"):
        return False
    return not any(os.path.exists(p) for p in DRIVER_PATHS)


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None when there is no library, driver or GPU."""
    if _no_driver():
        return None
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


def _fake_samples(value: str) -> list[GpuSample]:
    """Readings of a declared inventory: the file's, or an idle GPU of unknown temperature for
    each ``TYPE:COUNT`` GPU."""
    if is_fake_file(value):
        return [
            GpuSample(
                index=i,
                id=str(i),
                name=g.name,
                uuid=g.uuid,
                memory_used_mb=g.memory_used_mb,
                memory_total_mb=g.memory_total_mb,
                utilization_pct=g.utilization_pct,
                temperature_c=g.temperature_c,
                processes=g.processes,
                ecc_uncorrected=g.ecc_uncorrected,
                ecc_corrected=g.ecc_corrected,
                fake=True,
            )
            for i, g in enumerate(read_fake_file(value))
        ]
    return [
        GpuSample(
            index=g.index,
            id=g.id,
            name=g.name,
            uuid="",
            memory_used_mb=0,
            memory_total_mb=0,
            utilization_pct=0.0,
            temperature_c=None,
            processes=None,
            ecc_uncorrected=None,
            ecc_corrected=None,
            fake=True,
        )
        for g in parse_fake(value)
    ]


def _optional(read: Any) -> Any:
    """``read()``, or None when the driver does not report that value."""
    try:
        return read()
    except Exception:
        return None


def _process_count(nvml: Any, handle: Any) -> int | None:
    """Compute and graphics processes on the GPU (a process doing both counts once)."""
    pids: set[int] = set()
    known = False
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = getattr(nvml, name, None)
        procs = _optional(lambda fn=fn: fn(handle)) if fn is not None else None
        if procs is not None:
            known = True
            pids.update(int(getattr(p, "pid", 0)) for p in procs)
    return len(pids) if known else None


def _ecc(nvml: Any, handle: Any, kind: str) -> int | None:
    error_type = getattr(nvml, f"NVML_MEMORY_ERROR_TYPE_{kind}", None)
    counter = getattr(nvml, "NVML_VOLATILE_ECC", None)
    if error_type is None or counter is None:
        return None
    value = _optional(lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter))
    return int(value) if value is not None else None


def _nvml_sample(nvml: Any, index: int, gid: str, handle: Any) -> GpuSample:
    util = nvml.nvmlDeviceGetUtilizationRates(handle)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    temp = _optional(lambda: nvml.nvmlDeviceGetTemperature(handle, sensor))
    name = _optional(lambda: _short_name(_text(nvml.nvmlDeviceGetName(handle))))
    return GpuSample(
        index=index,
        id=gid,
        name=name or "GPU",
        uuid=_uuid(nvml, handle),
        memory_used_mb=int(mem.used // 2**20),
        memory_total_mb=int(mem.total // 2**20),
        utilization_pct=float(util.gpu),
        temperature_c=float(temp) if temp is not None else None,
        processes=_process_count(nvml, handle),
        ecc_uncorrected=_ecc(nvml, handle, "UNCORRECTED"),
        ecc_corrected=_ecc(nvml, handle, "CORRECTED"),
    )


def sample(
    ids: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> list[GpuSample]:
    """What each GPU reads now: a declared inventory's readings, else NVML's (temperature,
    processes and ECC counts where the driver reports them). Never raises: a GPU whose
    utilisation or memory cannot be read ends the list there, as :func:`usage` does.

    ``ids`` selects GPUs by physical index or UUID; each result carries the id it was asked by.
    """
    env = os.environ if environ is None else environ
    fake = env.get(ENV_FAKE_GPUS)
    if fake is not None and fake.strip():
        try:
            declared = _fake_samples(fake)
        except BadInput:
            return []
        return [g for g in declared if ids is None or g.id in ids]
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
            out.append(_nvml_sample(nvml, i, gid, h))
    except Exception:
        pass
    finally:
        _shutdown(nvml)
    return out


def usage(ids: list[str] | None = None, environ: Mapping[str, str] | None = None) -> list[GpuUsage]:
    """Current utilisation per GPU (``TYPE:COUNT`` fake GPUs report zero). Never raises.

    ``ids`` selects GPUs by physical index or UUID; each result carries the id it was asked by.
    """
    return [
        GpuUsage(
            id=g.id,
            utilization_pct=g.utilization_pct,
            memory_used_mb=g.memory_used_mb,
            memory_total_mb=g.memory_total_mb,
        )
        for g in sample(ids, environ)
    ]
