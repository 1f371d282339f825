"""Names in Redis and on the broker, all under the pool's name (``PoolSettings.name``).

::

    <pool>:attempt:<launch key>   hash: the attempt's record (state, worker, endpoint, ...)
    <pool>:boot:<launch key>      the attempt's bootstrap (plan, agent token, job env); like a
                                  cloud's user-data, it holds the job's secrets: deleted when
                                  the attempt ends
    <pool>:alive:<launch key>     set with a TTL by the task running the attempt
    <pool>:worker:<worker name>   hash with a TTL: a live worker (GPU, queue, current attempt)
    <pool>:workers                set of worker names (entries whose hash expired are dropped)
    <pool>:queues                 hash: queue name -> what its workers offer (JSON)
    <pool>:duplicates             list: deliveries dropped because the attempt was claimed
    <pool>:gang:<run id>          hash: host -> the launch key of the run's gang node that
                                  host holds (a host holds one node of a gang at most)
    <pool>:gangport:run:<run id>  the run's rendezvous port slot (leased, a TTL)
    <pool>:gangport:slot:<slot>   the run holding the slot (leased, a TTL)
    <pool>:celery:...             Celery's own keys (its ``global_keyprefix``)

Queues are ``<pool>.<gpu type>.x<count>`` (``corral.l40s.x1``): a worker serves the queue of
its GPU type and count, so the queue routes an attempt by both. The CPU workers
(``corral worker --cpu-slots N``) serve ``<pool>.cpu.x0``: jobs that ask for no GPU.
"""

from __future__ import annotations

import re

_SAFE = re.compile(r"[^a-z0-9]+")

#: kombu's separator between a queue and its priority list on Redis
PRIORITY_SEP = "\x06\x16"
#: Celery's priority levels on Redis: 0 is served first
PRIORITY_STEPS = tuple(range(10))
#: the spec's priorities: higher runs first
MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = 0, 9, 5
#: the "GPU type" of the CPU workers and of their queue (count 0)
CPU_TYPE = "cpu"


def gpu_slug(gpu_type: str) -> str:
    return _SAFE.sub("-", gpu_type.strip().lower()).strip("-") or "gpu"


def broker_priority(priority: int) -> int:
    """The message priority on Redis (0 first) of a spec priority (9 first)."""
    return MAX_PRIORITY - max(MIN_PRIORITY, min(MAX_PRIORITY, int(priority)))


class Keys:
    """Every Redis key and queue name of one pool."""

    def __init__(self, pool: str):
        self.pool = pool
        self.celery_prefix = f"{pool}:celery:"
        self.workers = f"{pool}:workers"
        self.queues = f"{pool}:queues"
        self.duplicates = f"{pool}:duplicates"

    def attempt(self, key: str) -> str:
        return f"{self.pool}:attempt:{key}"

    def boot(self, key: str) -> str:
        return f"{self.pool}:boot:{key}"

    def alive(self, key: str) -> str:
        return f"{self.pool}:alive:{key}"

    def gang(self, run_id: str) -> str:
        return f"{self.pool}:gang:{run_id}"

    def gang_port_of(self, run_id: str) -> str:
        return f"{self.pool}:gangport:run:{run_id}"

    @property
    def gang_port_slot(self) -> str:
        """The prefix of the port slots' keys (the slot's number follows)."""
        return f"{self.pool}:gangport:slot:"

    def worker(self, name: str) -> str:
        return f"{self.pool}:worker:{name}"

    def queue(self, gpu_type: str, count: int) -> str:
        return f"{self.pool}.{gpu_slug(gpu_type)}.x{int(count)}"

    def cpu_queue(self) -> str:
        """The queue of the CPU workers: jobs that ask for no GPU."""
        return self.queue(CPU_TYPE, 0)

    def queue_lists(self, queue: str) -> list[str]:
        """The Redis lists holding ``queue``'s waiting messages, first served first."""
        base = self.celery_prefix + queue
        return [base if p == 0 else f"{base}{PRIORITY_SEP}{p}" for p in PRIORITY_STEPS]
