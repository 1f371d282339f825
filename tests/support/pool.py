"""A scratch pool on the local Redis server and real ``corral worker`` processes for it.

Every test gets its own pool name (all its Redis keys and queues start with it, deleted at the
end) on ``CORRAL_TEST_REDIS`` (default ``redis://127.0.0.1:6379/13``): other tests and other
people's pools on the same server never see it. Short heartbeats make a lost worker show in
about two seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.queue.registry import Registry, WorkerInfo
from corral.queue.settings import PoolSettings
from support.waiting import wait_until

REDIS_URL = os.environ.get("CORRAL_TEST_REDIS", "redis://127.0.0.1:6379/13")


@contextlib.contextmanager
def scratch_pool(broker_url: str = REDIS_URL, **overrides: float) -> Iterator[PoolSettings]:
    """A pool of its own on the local Redis server (or ``broker_url``); every key of it is
    deleted afterwards."""
    fields = {
        "heartbeat_s": 0.25,
        "lost_after_s": 2.0,
        "outage_grace_s": 3.0,
        "start_margin_s": 60.0,
        "max_runtime_s": 3600.0,
        **overrides,
    }
    settings = PoolSettings(
        broker_url=broker_url, name=f"t{uuid.uuid4().hex[:12]}", **fields
    ).checked()
    try:
        yield settings
    finally:
        client = connect(settings)
        names = list(client.scan_iter(match=f"{settings.name}*", count=1000))
        names += list(client.scan_iter(match=f"_kombu.binding.{settings.name}*", count=1000))
        if names:
            client.delete(*names)
        client.close()


def pool_env(settings: PoolSettings) -> dict[str, str]:
    """The environment a controller or a worker of ``settings``' pool needs."""
    return {
        "CORRAL_POOL_BROKER": settings.broker_url,
        "CORRAL_POOL_NAME": settings.name,
        "CORRAL_POOL_HEARTBEAT": f"{settings.heartbeat_s}s",
        "CORRAL_POOL_LOST_AFTER": f"{settings.lost_after_s}s",
        "CORRAL_POOL_OUTAGE_GRACE": f"{settings.outage_grace_s}s",
        "CORRAL_POOL_START_MARGIN": f"{settings.start_margin_s}s",
        "CORRAL_POOL_MAX_RUNTIME": f"{settings.max_runtime_s}s",
        "CORRAL_POOL_PRICE_PER_GPU_HOUR": str(settings.price_per_gpu_hour),
    }


class Workers:
    """``corral worker`` processes of one pool, each a "machine" of its own (own process
    group, own home); all of them stopped by :meth:`stop_all`."""

    def __init__(self, settings: PoolSettings, root: Path, fake_gpus: str = "L40S:2"):
        self.settings = settings
        self.root = root
        self.fake_gpus = fake_gpus
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.registry = Registry(connect(settings), Keys(settings.name))

    def start(
        self, machine: str, gpus: str, *extra: str, wait: bool = True, cpu_slots: int = 0
    ) -> subprocess.Popen[bytes]:
        """``corral worker --gpus GPUS`` (``""``: none) with ``cpu_slots`` CPU workers."""
        home = self.root / machine
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **pool_env(self.settings)}
        # the GPU locks of this test's machines alone (a module-scoped fixture runs before the
        # per-test CORRAL_GPU_LOCK_DIR is set): other tests declare the same fake GPU ids
        env.update(
            CORRAL_HOME=str(home),
            CORRAL_FAKE_GPUS=self.fake_gpus,
            CORRAL_GPU_LOCK_DIR=str(self.root / "gpu-locks"),
        )
        log = open(home / "worker.out", "ab")  # noqa: SIM115 - the process writes it
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral.cli",
                "worker",
                "--gpus",
                gpus,
                "--name",
                machine,
                *(["--cpu-slots", str(cpu_slots)] if cpu_slots else []),
                *extra,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[machine] = proc
        if wait:
            names = {f"{machine}-gpu{g}" for g in gpus.split(",") if g}
            names |= {f"{machine}-cpu{i}" for i in range(cpu_slots)}
            self.wait_registered(names, machine)
        return proc

    def wait_registered(self, names: set[str], machine: str) -> None:
        def up() -> bool:
            proc = self.procs[machine]
            if proc.poll() is not None:
                raise AssertionError(f"worker {machine} exited: {self.log(machine)}")
            return names <= {w.name for w in self.registry.workers()}

        wait_until(up, 60, 0.1, lambda: f"workers {names} to register: {self.log(machine)}")

    def log(self, machine: str) -> str:
        out = []
        for path in [
            *sorted((self.root / machine).rglob("*.log")),
            self.root / machine / "worker.out",
        ]:
            if path.is_file():
                out.append(f"== {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def workers(self) -> list[WorkerInfo]:
        return self.registry.workers()

    def kill(self, machine: str) -> None:
        """kill -9 of the whole machine: its ``corral worker`` (its workers and their attempts
        die with it)."""
        self.procs[machine].send_signal(signal.SIGKILL)
        self.procs[machine].wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its group: workers and agents
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
