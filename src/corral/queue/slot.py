"""One Celery worker of the pool: one GPU (or a group of GPUs), one queue, one attempt at a
time. Started by ``corral worker`` (:mod:`corral.queue.supervisor`) as
``python -m corral.queue.slot`` with ``CUDA_VISIBLE_DEVICES`` pinned to its GPUs and its
description in ``CORRAL_POOL_SLOT`` (JSON).

It dies with the supervisor, and the process running an attempt dies with it
(``PR_SET_PDEATHSIG``): a ``kill -9`` anywhere above an attempt takes the attempt down with it,
like a machine that is gone. A thread keeps the worker's record alive in Redis
(:mod:`corral.queue.registry`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from corral.queue.app import make_app
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect
from corral.queue.config import SlotConfig
from corral.queue.keys import Keys
from corral.queue.limits import Mechanism
from corral.queue.registry import Registry, WorkerInfo
from corral.queue.runner import WarmAgent, die_with_parent
from corral.queue.settings import PoolSettings

ENV_SLOT = "CORRAL_POOL_SLOT"
#: the supervisor's pid: a worker whose supervisor died before it could follow it exits
ENV_PARENT = "CORRAL_POOL_PARENT"

log = logging.getLogger("corral.worker")


class Heartbeat(threading.Thread):
    """Keeps the worker's record alive in Redis while the worker process lives."""

    def __init__(self, settings: PoolSettings, info: WorkerInfo):
        super().__init__(name="corral-heartbeat", daemon=True)
        self.settings = settings
        self.info = info
        self.stopping = threading.Event()
        self.registry = Registry(connect(settings), Keys(settings.name))
        self.ttl = 3 * settings.heartbeat_s

    def run(self) -> None:
        registered = False
        while not self.stopping.is_set():
            try:
                if not registered or not self.registry.beat(self.info.name, self.ttl):
                    self.registry.register(self.info, self.ttl)
                registered = True
            except Exception as exc:  # Redis away for a moment: try again next beat
                log.warning("worker %s: heartbeat failed: %s", self.info.name, exc)
                registered = False
            self.stopping.wait(self.settings.heartbeat_s)

    def stop(self) -> None:
        self.stopping.set()
        try:
            self.registry.unregister(self.info.name)
        except Exception:
            pass


def worker_argv(slot: SlotConfig) -> list[str]:
    """The ``celery worker`` arguments of a slot (the settings that matter are on the app)."""
    return [
        "worker",
        "--queues",
        slot.queue,
        "--hostname",
        f"{slot.name}@{slot.host}",
        "--concurrency",
        "1",
        "--pool",
        "prefork",
        "--prefetch-multiplier",
        "1",
        "--max-tasks-per-child",
        "1",
        "--task-events",
        "--without-gossip",
        # no revoked-task sync with the other workers at start (a second each): an attempt is
        # claimed once in Redis, so a cancelled one never runs whatever a worker remembers
        "--without-mingle",
        "--loglevel",
        "INFO",
    ]


def main(argv: list[str] | None = None) -> int:
    import time

    from celery import signals

    from corral.queue.tasks import register

    die_with_parent(signal.SIGKILL)  # the supervisor is this worker's machine
    if os.environ.get(ENV_PARENT) and os.getppid() != int(os.environ[ENV_PARENT]):
        return 1  # it died before we asked to follow it
    slot = SlotConfig.from_json(os.environ[ENV_SLOT])
    settings = PoolSettings.from_env()
    Path(slot.home).mkdir(parents=True, exist_ok=True)
    app = make_app(settings)
    # the agent of this worker's next attempt, started while it waits (in the attempt's
    # process: the agent is that process's child, as a cold one is)
    warm = WarmAgent(Path(slot.home) / "warm-agent.out") if slot.warm_agent else None
    register(app, settings, slot, warm)
    heartbeat = Heartbeat(settings, slot.info(time.time()))

    @signals.worker_process_init.connect
    def _child(**_: Any) -> None:  # the process of one attempt dies with this worker
        die_with_parent(signal.SIGKILL)
        if warm is not None:
            warm.start()

    @signals.worker_ready.connect
    def _ready(**_: Any) -> None:
        heartbeat.start()

    @signals.worker_shutdown.connect
    def _shutdown(**_: Any) -> None:
        heartbeat.stop()

    attempts = AttemptStore(connect(settings), Keys(settings.name))

    @signals.task_received.connect
    def _received(request: Any = None, **_: Any) -> None:
        # when this worker took the attempt off the queue (the order of the queue: its process
        # for the attempt starts now and claims it)
        try:
            args = list(getattr(request, "args", None) or [])
            if args and isinstance(args[0], str):
                attempts.received(args[0], slot.name)
        except Exception as exc:  # a note only: never in the way of the attempt
            log.warning("worker %s: noting a received attempt failed: %s", slot.name, exc)

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {slot.name} %(levelname)s %(message)s"
    )
    # once, in the worker's log: how its jobs' limits are enforced here, and why
    limited = slot.job_memory is not None or slot.job_cpus is not None
    mechanism = Mechanism.detect() if limited else Mechanism(None)
    log.info("%s", mechanism.describe(slot.job_memory, slot.job_cpus, list(slot.cores)))
    app.worker_main(worker_argv(slot) + list(argv or []))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
