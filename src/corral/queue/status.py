"""What the pool looks like now: its workers, what each runs, and each queue's length."""

from __future__ import annotations

from dataclasses import dataclass

from corral.queue.client import broker_errors, connect, safe_url
from corral.queue.keys import Keys
from corral.queue.registry import QueueInfo, Registry, WorkerInfo
from corral.queue.settings import PoolSettings


@dataclass(frozen=True)
class QueueState:
    """One queue (a GPU type and count) of the pool."""

    queue: str
    gpu_type: str
    gpu_count: int
    workers: int
    busy: int
    waiting: int

    @property
    def wanted(self) -> int:
        """Workers needed to run everything now: the busy ones and one per waiting attempt."""
        return self.busy + self.waiting

    @property
    def delta(self) -> int:
        """Workers to add (positive) or that could go (negative, idle ones)."""
        return self.wanted - self.workers


@dataclass(frozen=True)
class PoolState:
    pool: str
    broker: str
    workers: list[WorkerInfo]
    queues: list[QueueState]


def read_state(settings: PoolSettings, client: object = None) -> PoolState:
    """The pool's workers and queues now (ProviderUnavailable naming the broker if it cannot
    be read)."""
    with broker_errors(settings):
        r = client if client is not None else connect(settings)
        registry = Registry(r, Keys(settings.name))
        workers = registry.workers()
        known: dict[str, QueueInfo] = {q.queue: q for q in registry.queues()}
        queues = []
        for name in sorted(set(known) | {w.queue for w in workers}):
            info = known.get(name)
            serving = [w for w in workers if w.queue == name]
            gpu_type = info.gpu_type if info else (serving[0].gpu_type if serving else "?")
            count = info.count if info else (len(serving[0].gpus) if serving else 0)
            queues.append(
                QueueState(
                    queue=name,
                    gpu_type=gpu_type,
                    gpu_count=count,
                    workers=len(serving),
                    busy=sum(1 for w in serving if w.busy),
                    waiting=registry.waiting(name),
                )
            )
    return PoolState(
        pool=settings.name, broker=safe_url(settings.broker_url), workers=workers, queues=queues
    )
