"""cgroup v2 for the pool's job limits: one child cgroup per attempt (``memory.max``,
``cpu.max``) under a delegated cgroup2 directory this worker may write.

The directory is ``CORRAL_WORKER_CGROUP`` when set, else the worker's own cgroup. It is usable
when it is on a cgroup2 hierarchy, offers the ``memory`` and ``cpu`` controllers, is writable,
and hands them to its children (``cgroup.subtree_control``; a cgroup that holds processes of
its own cannot: the kernel's "no internal processes" rule, hence an empty delegated directory
such as a systemd unit's with ``Delegate=yes``). :func:`find` says why not otherwise, in one
line, and the worker falls back to affinity and a memory watcher (:mod:`corral.queue.limits`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

ENV_CGROUP = "CORRAL_WORKER_CGROUP"
#: cpu.max's period, in microseconds
CPU_PERIOD_US = 100_000
#: memory.max is the job's limit plus this, for the agent beside it: the worker's watcher
#: holds the job to its own limit, the kernel catches what grows faster than it looks
AGENT_HEADROOM = 256 * 2**20
WANTED = ("memory", "cpu")


def mount_point() -> Path | None:
    """Where the cgroup2 hierarchy is mounted (None: nowhere, a cgroup v1 box)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, _, post = line.partition(" - ")
        if post.split(" ", 1)[0] == "cgroup2":
            return Path(pre.split(" ")[4])
    return None


def _own_path() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


def find(environ: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """The delegated cgroup2 directory to make the attempts' cgroups in, or None and why not."""
    env = os.environ if environ is None else environ
    mount = mount_point()
    if mount is None:
        return None, "no cgroup2 hierarchy is mounted on this box (cgroup v1)"
    explicit = env.get(ENV_CGROUP, "").strip()
    own = _own_path()
    if explicit:
        base = Path(explicit)
    elif own is None:
        return None, "this process has no cgroup2 path (/proc/self/cgroup)"
    else:
        base = mount / own.lstrip("/")
    try:
        have = (base / "cgroup.controllers").read_text().split()
    except OSError:
        return None, f"{base} is not a cgroup2 directory"
    missing = [c for c in WANTED if c not in have]
    if missing:
        return None, (
            f"the cgroup2 hierarchy at {base} lacks the {' and '.join(missing)} controller(s) "
            "(on this box they are on cgroup v1)"
        )
    if not os.access(base, os.W_OK):
        return None, f"{base} is not writable by this user (not delegated)"
    try:
        enabled = (base / "cgroup.subtree_control").read_text().split()
        if any(c not in enabled for c in WANTED):
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in WANTED))
    except OSError as exc:
        return None, (
            f"cannot hand memory and cpu to the child cgroups of {base}: "
            f"{exc.strerror or exc} (a cgroup with processes of its own cannot: set "
            f"{ENV_CGROUP} to an empty delegated cgroup2 directory)"
        )
    return base, ""


class AttemptCgroup:
    """The cgroup of one attempt: made with its limits, joined by the agent (its children
    follow), removed once empty."""

    def __init__(self, base: Path, key: str):
        self.path = base / f"corral-{key}"

    def create(self, memory: int | None, cpus: float | None) -> None:
        """Make the cgroup and write its limits (OSError when it cannot)."""
        self.path.mkdir(exist_ok=True)
        if memory is not None:
            (self.path / "memory.max").write_text(str(memory + AGENT_HEADROOM))
            with contextlib.suppress(OSError):  # no swap to hide in (absent without swap)
                (self.path / "memory.swap.max").write_text("0")
        if cpus is not None:
            quota = max(1000, int(cpus * CPU_PERIOD_US))
            (self.path / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` into the cgroup (0: the calling process, the agent before it
        execs)."""
        (self.path / "cgroup.procs").write_text(str(pid or os.getpid()))

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for going over ``memory.max``."""
        try:
            for line in (self.path / "memory.events").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()
