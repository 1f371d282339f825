"""Live workers and the queues they serve, in Redis.

Each worker (one per GPU, or per group of GPUs) keeps ``<pool>:worker:<name>`` alive with a
TTL of three heartbeats and says there which attempt it runs; a worker that dies drops out on
its own. ``<pool>:queues`` remembers every queue a worker ever served and what it offers, so
the pool keeps taking runs for a GPU type while its workers are scaled down to zero.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from corral.queue.keys import Keys


@dataclass(frozen=True)
class WorkerInfo:
    """A worker as it registers itself."""

    name: str
    host: str
    pid: int
    queue: str
    gpu_type: str
    gpus: list[str]
    cpus: int
    memory_gb: float
    started_at: float
    #: what it runs now ("" when idle)
    key: str = ""
    run_id: str = ""

    @property
    def busy(self) -> bool:
        return bool(self.key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueInfo:
    """A queue and what its workers offer."""

    queue: str
    gpu_type: str
    count: int
    cpus: int
    memory_gb: float
    seen_at: float


class Registry:
    def __init__(self, client: Any, keys: Keys, clock: Callable[[], float] = time.time):
        self.r = client
        self.keys = keys
        self.clock = clock

    # --- a worker's side -------------------------------------------------------------------

    def register(self, info: WorkerInfo, ttl_s: float) -> None:
        """Announce ``info`` (idle) and its queue; call :meth:`beat` from then on."""
        queue = {
            "gpu_type": info.gpu_type,
            "count": len(info.gpus),
            "cpus": info.cpus,
            "memory_gb": info.memory_gb,
            "seen_at": self.clock(),
        }
        fields = {k: v for k, v in info.to_dict().items() if k not in ("key", "run_id")}
        pipe = self.r.pipeline()
        pipe.hset(self.keys.worker(info.name), mapping=_flat(fields))  # not what it runs
        pipe.pexpire(self.keys.worker(info.name), int(ttl_s * 1000))
        pipe.sadd(self.keys.workers, info.name)
        pipe.hset(self.keys.queues, info.queue, json.dumps(queue))
        pipe.execute()

    def beat(self, name: str, ttl_s: float) -> bool:
        """Keep the worker's record alive; False if it had expired (register again)."""
        pipe = self.r.pipeline()
        pipe.hexists(self.keys.worker(name), "pid")
        pipe.pexpire(self.keys.worker(name), int(ttl_s * 1000))
        return bool(pipe.execute()[0])

    def set_current(self, name: str, ttl_s: float, key: str = "", run_id: str = "") -> None:
        """Say what the worker ``name`` runs now (``key`` "" when idle)."""
        pipe = self.r.pipeline()
        pipe.hset(self.keys.worker(name), mapping={"key": key, "run_id": run_id})
        pipe.pexpire(self.keys.worker(name), int(ttl_s * 1000))
        pipe.sadd(self.keys.workers, name)
        pipe.execute()

    def unregister(self, name: str) -> None:
        pipe = self.r.pipeline()
        pipe.delete(self.keys.worker(name))
        pipe.srem(self.keys.workers, name)
        pipe.execute()

    # --- readers ---------------------------------------------------------------------------

    def workers(self) -> list[WorkerInfo]:
        """Live workers, by name; names whose record expired are dropped from the set."""
        names = sorted(self.r.smembers(self.keys.workers))
        if not names:
            return []
        pipe = self.r.pipeline()
        for name in names:
            pipe.hgetall(self.keys.worker(name))
        out, gone = [], []
        for name, raw in zip(names, pipe.execute(), strict=True):
            info = _worker(raw)
            if info is None:
                gone.append(name)
            else:
                out.append(info)
        if gone:
            self.r.srem(self.keys.workers, *gone)
        return out

    def queues(self) -> list[QueueInfo]:
        out = []
        for queue, raw in sorted(self.r.hgetall(self.keys.queues).items()):
            try:
                d = json.loads(raw)
                out.append(
                    QueueInfo(
                        queue=queue,
                        gpu_type=str(d["gpu_type"]),
                        count=int(d["count"]),
                        cpus=int(d.get("cpus", 0)),
                        memory_gb=float(d.get("memory_gb", 0.0)),
                        seen_at=float(d.get("seen_at", 0.0)),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def waiting(self, queue: str) -> int:
        """Messages waiting in ``queue`` (every priority)."""
        pipe = self.r.pipeline()
        for name in self.keys.queue_lists(queue):
            pipe.llen(name)
        return sum(int(n) for n in pipe.execute())


def _flat(d: dict[str, Any]) -> dict[str, str]:
    return {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in d.items()}


def _worker(raw: dict[str, str]) -> WorkerInfo | None:
    try:
        return WorkerInfo(
            name=raw["name"],
            host=raw["host"],
            pid=int(raw["pid"]),
            queue=raw["queue"],
            gpu_type=raw["gpu_type"],
            gpus=[str(g) for g in json.loads(raw["gpus"])],
            cpus=int(raw.get("cpus", "0")),
            memory_gb=float(raw.get("memory_gb", "0")),
            started_at=float(raw.get("started_at", "0")),
            key=raw.get("key", ""),  # absent while a worker re-registers: idle
            run_id=raw.get("run_id", ""),
        )
    except (KeyError, ValueError, TypeError):
        return None
