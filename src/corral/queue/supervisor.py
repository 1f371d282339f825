"""``corral worker``: one Celery worker per GPU of this machine (or per group of GPUs),
started, watched and restarted from here.

Each worker (:mod:`corral.queue.slot`) is a process of its own with ``CUDA_VISIBLE_DEVICES``
pinned to its GPUs, serving the queue of its GPU type and count. This process holds the
machine-wide lock of every GPU it serves (:mod:`corral.device_locks`) for its whole life, so
the local provider never hands one of them out, and a second ``corral worker`` on the same GPU
is refused. A worker that exits on its own is started again after a pause that doubles up to a
minute. The first SIGTERM or Ctrl-C stops taking attempts and waits for the running ones to
end (Celery's warm shutdown); a second one stops them now (they are lost machines to the
controller, which recovers their runs from their checkpoints elsewhere).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from corral.device_locks import DeviceLocks, gpu_lock_dir
from corral.errors import BadInput, NoCapacity
from corral.gpu import GpuInfo, detect
from corral.queue.board import Board
from corral.queue.client import broker_errors, connect, safe_url
from corral.queue.config import SlotConfig
from corral.queue.control import clear_state, worker_home
from corral.queue.keys import CPU_TYPE, Keys
from corral.queue.limits import SHARE, cores_for, usable_cores
from corral.queue.registry import Registry
from corral.queue.settings import PoolSettings
from corral.queue.slot import ENV_PARENT, ENV_SLOT

#: longest pause before a worker that keeps exiting is started again
MAX_RESTART_DELAY_S = 60.0


@dataclass
class WorkerOptions:
    #: GPU ids to serve (None: every GPU found)
    gpus: list[str] | None = None
    #: GPUs per Celery worker (its attempts get that many)
    gpus_per_worker: int = 1
    #: address the agents' APIs bind
    bind: str = "127.0.0.1"
    #: address the controller reaches them on (default: the bind address, or this machine's
    #: address toward the broker when binding every interface)
    advertise: str | None = None
    #: prefix of the workers' names (default: this host's name)
    name: str | None = None
    #: the host the workers stand for (default: this machine's host name): the nodes of one
    #: multi-node job go to workers of distinct hosts (two ``corral worker`` on one machine
    #: given two hosts stand for two machines)
    host: str | None = None
    #: where attempts keep their files (default: CORRAL_HOME/worker)
    home: Path | None = None
    #: where attempts keep checkpoints (one directory per run under it); default: the plan's
    checkpoint_dir: str | None = None
    #: workers to start with (None: one per GPU group); ``corral pool scale`` changes it
    workers: int | None = None
    #: CPU workers beside the GPU ones (``<prefix>-cpu<i>``, serving jobs that ask for no GPU)
    cpu_slots: int = 0
    #: each job's memory limit in bytes, CPUs (None: no limit; ``"share"``: its worker's share
    #: of the box, ``cpus``/``memory_gb`` of its slot)
    job_memory: int | str | None = None
    job_cpus: float | str | None = None
    #: each idle worker keeps its next attempt's agent started (``corral.queue.runner``)
    warm_agent: bool = True
    restart: bool = True
    extra: dict[str, str] = field(default_factory=dict)


def _route_ip(broker_url: str) -> str:
    """This machine's address on the route to the broker (no packet is sent)."""
    host = urlsplit(broker_url).hostname or "127.0.0.1"
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return str(s.getsockname()[0])
    return socket.gethostname()


def plan_slots(
    gpus: list[GpuInfo], opts: WorkerOptions, settings: PoolSettings
) -> list[SlotConfig]:
    """The workers to start: GPUs of one type in groups of ``gpus_per_worker``, then
    ``cpu_slots`` CPU workers. The box's cores and memory are shared out by weight (a GPU
    worker's is its GPU count, a CPU worker's 1): each worker's ``cpus``/``memory_gb``, and
    the cores its jobs are pinned to when ``job_cpus`` limits them."""
    chosen = list(gpus)
    if opts.gpus is not None:
        known = {g.id: g for g in gpus}
        missing = [i for i in opts.gpus if i not in known]
        if missing:
            have = ", ".join(known) or "none"
            raise BadInput(f"--gpus: no GPU {', '.join(missing)} on this machine (it has {have})")
        chosen = [known[i] for i in opts.gpus]
    if opts.cpu_slots < 0:
        raise BadInput("--cpu-slots must be 0 or more")
    if not chosen and not opts.cpu_slots:
        raise BadInput(
            "no GPU found on this machine: a worker serves GPUs "
            "(CORRAL_FAKE_GPUS=L40S:2 declares a fake inventory for a demo; "
            "--cpu-slots N serves CPU jobs)"
        )
    size = opts.gpus_per_worker
    if size < 1:
        raise BadInput("--gpus-per-worker must be 1 or more")
    host = opts.host or socket.gethostname().split(".")[0] or "host"
    if not host.strip() or any(c.isspace() for c in host):
        raise BadInput(f"--host {host!r}: expected a host name without spaces")
    prefix = opts.name or host
    advertise = opts.advertise or (
        _route_ip(settings.broker_url) if opts.bind in ("0.0.0.0", "::") else opts.bind
    )
    home = worker_home(opts.home)
    keys = Keys(settings.name)
    memory = round(psutil.virtual_memory().total / 2**30, 1)
    units = max(1, len(chosen) + opts.cpu_slots)  # a GPU weighs 1, a CPU worker 1
    ncpu = len(usable_cores())
    # (name, GPU ids, GPU type, queue, weight) of each worker
    shapes: list[tuple[str, list[str], str, str, int]] = []
    by_type: dict[str, list[GpuInfo]] = {}
    for g in chosen:
        by_type.setdefault(g.name, []).append(g)
    for gpu_type, group in by_type.items():
        if len(group) % size:
            raise BadInput(
                f"--gpus-per-worker {size}: {len(group)} {gpu_type} GPUs do not split "
                f"into groups of {size}"
            )
        for i in range(0, len(group), size):
            ids = [g.id for g in group[i : i + size]]
            name = f"{prefix}-gpu{'-'.join(ids)}"
            shapes.append((name, ids, gpu_type, keys.queue(gpu_type, size), size))
    for i in range(opts.cpu_slots):
        shapes.append((f"{prefix}-cpu{i}", [], CPU_TYPE, keys.cpu_queue(), 1))
    slots = []
    offset = 0
    for name, ids, gpu_type, queue, weight in shapes:
        cpus = max(1, ncpu * weight // units)
        memory_gb = round(memory * weight / units, 1)
        job_cpus = float(cpus) if opts.job_cpus == SHARE else opts.job_cpus
        job_memory = int(memory_gb * 2**30) if opts.job_memory == SHARE else opts.job_memory
        assert not isinstance(job_cpus, str) and not isinstance(job_memory, str)
        slots.append(
            SlotConfig(
                name=name,
                host=host,
                bind_host=opts.bind,
                advertise_host=advertise,
                gpus=ids,
                gpu_type=gpu_type,
                queue=queue,
                home=str(home / name),
                cpus=cpus,
                memory_gb=memory_gb,
                checkpoint_dir=opts.checkpoint_dir,
                root=str(home / "fs"),
                job_memory=job_memory,
                job_cpus=job_cpus,
                cores=cores_for(offset, job_cpus),
                warm_agent=opts.warm_agent,
            )
        )
        offset += cpus
    return slots


class _Slot:
    def __init__(self, config: SlotConfig, log_dir: Path):
        self.config = config
        self.log = log_dir / f"{config.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.delay = 1.0
        self.start_at = 0.0
        self.started = 0.0
        #: it should run (False: scaled down by ``corral pool scale``)
        self.active = True
        #: stopping to be started again at once (a rolling restart)
        self.restarting = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self, settings: PoolSettings, extra: dict[str, str]) -> int:
        self.started = time.monotonic()
        env = {**os.environ, **extra}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self.config.gpus)
        env[ENV_SLOT] = self.config.to_json()
        env[ENV_PARENT] = str(os.getpid())
        env["CORRAL_POOL_BROKER"] = settings.broker_url
        env["CORRAL_POOL_NAME"] = settings.name
        with open(self.log, "ab") as out, open(os.devnull, "rb") as devnull:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "corral.queue.slot"],
                stdin=devnull,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
            )
        return self.proc.pid

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)


def serve(
    opts: WorkerOptions,
    settings: PoolSettings,
    say: Callable[[str], None] = print,
    gpus: list[GpuInfo] | None = None,
) -> int:
    """Start the workers and watch them until stopped; returns the exit code."""
    inventory = detect() if gpus is None else gpus
    slots = [_Slot(c, Path(c.home)) for c in plan_slots(inventory, opts, settings)]
    wanted = len(slots) if opts.workers is None else opts.workers
    if not 0 <= wanted <= len(slots):
        raise BadInput(
            f"--workers {wanted}: this box has {len(slots)} workers' worth of GPUs "
            f"({', '.join(s.config.name for s in slots)})"
        )
    with broker_errors(settings):
        client = connect(settings)
        client.ping()
    ids = [g for s in slots for g in s.config.gpus]
    namespace = "fake" if any(g.fake for g in inventory) else "gpu"
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    home = worker_home(opts.home)
    with _locked(DeviceLocks(gpu_lock_dir(), namespace), ids):
        for slot in slots[wanted:]:
            slot.active = False
        for slot in slots:
            Path(slot.config.home).mkdir(parents=True, exist_ok=True)
            if not slot.active:
                continue
            pid = slot.start(settings, opts.extra)
            c = slot.config
            what = f"GPU {','.join(c.gpus)} ({c.gpu_type})" if c.gpus else "CPU"
            say(f"worker {c.name}: {what}, queue {c.queue}, pid {pid}, log {slot.log}")
        say(
            f"{wanted} of {len(slots)} worker(s) on {safe_url(settings.broker_url)} (pool "
            f"{settings.name}); Ctrl-C stops taking attempts, a second Ctrl-C stops the running "
            "ones; `corral pool scale N` and `corral pool restart` act on them"
        )
        registry = Registry(client, Keys(settings.name))
        board = Board(home, slots, settings.name, registry.workers, say, os.getpid())
        try:
            return _watch(slots, settings, opts, stopping, say, board)
        finally:
            clear_state(home)


@contextlib.contextmanager
def _locked(locks: DeviceLocks, ids: list[str]) -> Iterator[None]:
    """Hold the machine-wide locks of ``ids`` (NoCapacity naming the GPU when one is taken)."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(locks.hold(ids))
    except NoCapacity as exc:
        gpu = exc.fields.get("gpu", "?")
        raise NoCapacity(
            f"GPU {gpu} is in use on this machine: by another `corral worker` or a run of the "
            f"local provider (lock {locks.path(str(gpu))})",
            fields=exc.fields,
        ) from None
    with stack:
        yield


def _preempt_running(slots: list[_Slot], settings: PoolSettings) -> int:
    """Ask the attempts these workers run to stop gracefully, as preemptions (the controller
    recovers their runs elsewhere from the checkpoint they save now)."""
    from corral.queue.attempts import AttemptStore

    names = {s.config.name for s in slots}
    try:
        client = connect(settings)
        keys = Keys(settings.name)
        attempts = AttemptStore(client, keys)
        count = 0
        for worker in Registry(client, keys).workers():
            if worker.name in names and worker.key:
                rec = attempts.get(worker.key)
                grace = rec.grace if rec is not None and rec.grace is not None else 30.0
                if attempts.preempt(worker.key, grace) in ("claimed", "running"):
                    count += 1
        return count
    except Exception:  # the broker is away: the third signal still stops everything
        return 0


def _watch(
    slots: list[_Slot],
    settings: PoolSettings,
    opts: WorkerOptions,
    stopping: list[int],
    say: Callable[[str], None],
    board: Board,
) -> int:
    told = 0
    while True:
        board.step(bool(stopping))
        if len(stopping) > told:
            told = len(stopping)
            if told == 1:
                say(
                    "stopping: running attempts finish first (Ctrl-C again to stop them "
                    "gracefully now: they checkpoint and resume elsewhere)"
                )
                for s in slots:
                    s.signal(signal.SIGTERM)  # Celery's warm shutdown
            elif told == 2:
                stopped = _preempt_running(slots, settings)
                say(f"stopping {stopped} running attempt(s) gracefully (Ctrl-C again: at once)")
            else:
                say("stopping now")
                for s in slots:
                    s.signal(signal.SIGQUIT)  # Celery's cold shutdown
        live = False
        for s in slots:
            code = None if s.proc is None else s.proc.poll()
            if code is None and s.proc is not None:
                live = True
                continue
            if stopping or not s.active:
                if s.proc is not None and not stopping:
                    say(f"worker {s.config.name} stopped ({code})")
                s.proc = None
                continue
            now = time.monotonic()
            if s.restarting and s.proc is not None:  # a rolling restart: at once
                s.restarting = False
                s.proc = None
                s.start_at = now
            if not opts.restart and s.proc is not None:
                continue
            if s.proc is not None:  # it just exited: start it again after a pause
                if now - s.started > MAX_RESTART_DELAY_S:
                    s.delay = 1.0  # it ran a good while: not a crash loop
                say(f"worker {s.config.name} exited ({code}); starting it again in {s.delay:g}s")
                s.proc = None
                s.start_at = now + s.delay
                s.delay = min(MAX_RESTART_DELAY_S, s.delay * 2)
            if now >= s.start_at:
                s.start(settings, opts.extra)
            live = True
        if not live and (stopping or not opts.restart):
            board.publish()
            return 0
        time.sleep(0.2)
