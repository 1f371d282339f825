"""Each job's memory and CPU limits on a worker (``corral worker --job-memory 16G --job-cpus 4``),
enforced on the attempt's process tree.

Two mechanisms, chosen once per worker (its log says which, and why):

* **cgroup v2**, where the box has a writable delegated cgroup2 directory
  (:mod:`corral.queue.cgroups`): one child cgroup per attempt with ``cpu.max`` (the CPUs as a
  quota) and ``memory.max`` (the job's limit plus room for the agent), joined by the agent
  before it starts, so every process of the job is in it;
* **the fallback** anywhere else (cgroup v1 boxes, an undelegated hierarchy): the agent and its
  children pinned to the worker's cores with ``sched_setaffinity`` (as ``docker --cpuset-cpus``).

In both, the worker's task reads the resident memory of the job's processes (every process
under the agent, from ``/proc``) at each of its looks (0.5 s) and, past the limit, kills them
(not the agent: it reports the stage's end and keeps its logs) after writing the reason on the
attempt's record, so the controller fails the run with it instead of recovering it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from corral.agent.path_items import process_tree
from corral.errors import BadInput
from corral.queue import cgroups

#: ``--job-memory share`` / ``--job-cpus share``: the worker's share of the box
SHARE = "share"
#: the option that sets the limit: named in the reason of a job killed for it
MEMORY_OPTION = "corral worker --job-memory"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt])(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def parse_memory(value: str, option: str = "--job-memory") -> int | str:
    """Bytes of ``16G``, ``512M``, ``1.5GiB`` (binary units), or :data:`SHARE`."""
    if value.strip().lower() == SHARE:
        return SHARE
    m = _SIZE.match(value)
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()]) if m else 0
    if size < 2**20:
        raise BadInput(f"{option}: {value!r} is not a size (e.g. 16G, 512M)")
    return size


def parse_cpus(value: str, option: str = "--job-cpus") -> float | str:
    """A positive number of CPUs (``4``, ``0.5``), at most this box's, or :data:`SHARE`."""
    if value.strip().lower() == SHARE:
        return SHARE
    try:
        cpus = float(value)
    except ValueError:
        cpus = math.nan
    if not cpus > 0 or math.isinf(cpus):
        raise BadInput(f"{option}: {value!r} is not a number of CPUs (e.g. 4, 0.5)")
    have = len(usable_cores())
    if cpus > have:
        raise BadInput(f"{option}: {value} is more than the {have} CPUs this worker may use")
    return cpus


def usable_cores() -> list[int]:
    """The cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cores_for(offset: int, cpus: float | None) -> list[int]:
    """The cores a slot's jobs are pinned to: ``ceil(cpus)`` of the usable ones from the
    slot's ``offset`` on (wrapping round when the slots ask for more than the box has)."""
    if cpus is None:
        return []
    usable = usable_cores()
    return [usable[(offset + i) % len(usable)] for i in range(math.ceil(cpus))]


def size_text(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Mechanism:
    """How the limits are enforced on this worker: the cgroup2 directory, or None and why."""

    cgroup_base: Path | None
    why_not: str = ""

    @classmethod
    def detect(cls) -> Mechanism:
        base, why = cgroups.find()
        return cls(base, why)

    def describe(self, memory: int | None, cpus: float | None, cores: list[int]) -> str:
        """The worker log's one line on its jobs' limits."""
        if memory is None and cpus is None:
            return "job limits: none (corral worker --job-memory, --job-cpus)"
        what = ", ".join(
            x
            for x in (
                f"memory {size_text(memory)}" if memory is not None else "",
                f"{cpus:g} CPU(s)" if cpus is not None else "",
            )
            if x
        )
        watcher = (
            "memory by a look at the job's resident memory every 0.5 s, killing it past the limit"
            if memory is not None
            else ""
        )
        if self.cgroup_base is not None:
            parts = ("cpu.max" if cpus is not None else "", watcher)
            how = "; ".join(x for x in parts if x)
            return f"job limits: {what}: cgroup v2 under {self.cgroup_base} ({how})"
        pinned = ",".join(map(str, cores))
        cpu = f"CPU by affinity to cores {pinned}" if cpus is not None else ""
        how = ", ".join(x for x in (cpu, watcher) if x)
        return f"job limits: {what}: cgroup v2 is not available ({self.why_not}): {how}"


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (``/proc``; the agent's own walk of a process tree)."""
    return (process_tree(pid) or [pid])[1:]


def resident(pids: Iterable[int]) -> int:
    """The resident memory of ``pids`` together, in bytes (``/proc/<pid>/statm``)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return total


def _threads(pid: int) -> list[int]:
    """The threads of process ``pid`` (0: just the calling thread)."""
    if not pid:
        return [0]
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return [pid]


class AttemptLimits:
    """The limits of one attempt: applied to its agent as it starts, watched while it runs."""

    def __init__(self, memory: int | None, cpus: float | None, cores: list[int], key: str):
        self.memory = memory
        self.cpus = cpus
        self.cores = cores
        self.mechanism = Mechanism.detect()
        self.cgroup = (
            cgroups.AttemptCgroup(self.mechanism.cgroup_base, key)
            if self.mechanism.cgroup_base is not None and (memory or cpus)
            else None
        )
        self.exceeded: str | None = None

    @property
    def any(self) -> bool:
        return self.memory is not None or self.cpus is not None

    def prepare(self) -> None:
        """Make the attempt's cgroup (falling back to affinity if the kernel refuses)."""
        if self.cgroup is not None:
            try:
                self.cgroup.create(self.memory, self.cpus)
            except OSError:
                self.cgroup = None

    def enter(self, pid: int = 0) -> None:
        """Put the agent under the limits: join the cgroup, or pin the cores. ``pid`` 0: the
        calling process (the agent's, before it execs); else that process (a warm agent,
        before it is given its attempt: the processes it starts inherit them)."""
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.join(pid)
                return
        if self.cpus is not None and self.cores:
            for tid in _threads(pid):  # each thread has its own mask; later ones inherit it
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, self.cores)

    def check(self, agent_pid: int) -> str | None:
        """Once per look: the reason, the first time the job went over its memory limit (its
        processes are killed then); None otherwise."""
        if self.exceeded is not None or self.memory is None:
            return None
        job = descendants(agent_pid)
        used = resident(job)
        if used > self.memory:
            self.exceeded = (
                f"memory limit: the job used {size_text(used)}, over its "
                f"{size_text(self.memory)} limit ({MEMORY_OPTION})"
            )
            return self.exceeded
        if self.cgroup is not None and self.cgroup.oom_kills():
            self.exceeded = (
                f"memory limit: the job went over its {size_text(self.memory)} limit and the "
                f"kernel killed it ({MEMORY_OPTION})"
            )
            return self.exceeded
        return None

    @staticmethod
    def kill_job(agent_pid: int, groups: Iterable[int] = ()) -> None:
        """SIGKILL every process under the agent, and the job's process groups."""
        for pgid in groups:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in descendants(agent_pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
