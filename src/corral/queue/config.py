"""What one worker of the pool is: its name, its GPUs, its queue and where its attempts live
(``corral worker`` decides it, the worker process and its tasks read it)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from corral.queue.registry import WorkerInfo


@dataclass(frozen=True)
class SlotConfig:
    """One worker: its name, its GPUs and where its attempts live."""

    name: str
    host: str
    bind_host: str
    advertise_host: str
    gpus: list[str]
    gpu_type: str
    queue: str
    home: str
    cpus: int
    memory_gb: float
    checkpoint_dir: str | None = None
    #: the directory standing for this machine's "/" for attempts whose code is shipped (the
    #: plan's paths go under it); shared by the workers of one ``corral worker``
    root: str = ""
    #: each job's limits (``corral worker --job-memory/--job-cpus``; None: none): its memory in
    #: bytes, its CPUs, and the cores it is pinned to where no cgroup v2 enforces the CPUs
    job_memory: int | None = None
    job_cpus: float | None = None
    cores: list[int] = field(default_factory=list)
    #: the worker keeps its next attempt's agent started while it is idle (a warm agent)
    warm_agent: bool = True

    @property
    def is_cpu(self) -> bool:
        """A CPU worker (no GPU: ``corral worker --cpu-slots``)."""
        return not self.gpus

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> SlotConfig:
        return cls(**json.loads(raw))

    def info(self, started_at: float) -> WorkerInfo:
        return WorkerInfo(
            name=self.name,
            host=self.host,
            pid=os.getpid(),
            queue=self.queue,
            gpu_type=self.gpu_type,
            gpus=list(self.gpus),
            cpus=self.cpus,
            memory_gb=self.memory_gb,
            started_at=started_at,
        )
