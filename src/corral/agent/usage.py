"""What a stage's processes use of the machine: CPU seconds and resident memory of the stage's
leader and every live descendant (``/proc``), for the idle watcher (``limits.idle_timeout``
counts CPU and memory activity besides progress and the GPUs). Standard library only."""

from __future__ import annotations

import os

from corral.agent.ranks import process_tree

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, its own and those of children it waited for; RSS bytes) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    try:  # after the command: state is [0], utime [11], stime [12], cutime [13], cstime [14]
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
        return ticks / _TICKS, int(fields[21]) * _PAGE
    except (IndexError, ValueError):
        return None


def stage_usage(leaders: dict[str, int]) -> dict[str, tuple[float, float]]:
    """Stage name -> (CPU seconds, RSS MiB) of its leader's process tree; stages whose leader
    is gone are left out, and so is everything without procfs."""
    if not leaders:
        return {}
    tree = process_tree()
    if not tree:
        return {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in tree.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, tuple[float, float]] = {}
    for name, leader in leaders.items():
        if leader not in tree:
            continue
        cpu = rss = 0.0
        todo = [leader]
        while todo:
            pid = todo.pop()
            got = _stat(pid)
            if got is not None:
                cpu += got[0]
                rss += got[1]
            todo.extend(children.get(pid, ()))
        out[name] = (round(cpu, 2), round(rss / 2**20, 1))
    return out
