"""The ranks of a multi-GPU launcher's stage: where a save signal goes.

torchrun (and ``accelerate launch --multi_gpu``, which runs torchrun's agent) starts each rank
in a session of its own: the ranks are the process groups below the stage's leader other than
its own. ``accelerate launch`` with one process (``--cpu``, or one GPU) and ``deepspeed`` on
one node keep their ranks in the launcher's group, where a signal to the group would also
reach the launcher (which dies of a SIGUSR1) and the shell. There, the ranks are the first
processes on each branch below the leader that are neither a shell nor a launcher (by their
``argv``): each gets the signal by its pid.
"""

from __future__ import annotations

import os
import re

#: programs that start ranks rather than being one: the launchers and the shells that run them
_LAUNCHER = re.compile(r"(?:^|/)(?:torchrun|accelerate|deepspeed|bash|sh|dash|zsh)$")
_LAUNCHER_MODULES = frozenset(
    {
        "torch.distributed.run",
        "torch.distributed.launch",
        "deepspeed.launcher.launch",
        "deepspeed.launcher.runner",
        "accelerate.commands.launch",
    }
)
_PYTHON = re.compile(r"(?:^|/)python[0-9.]*$")


def is_launcher(argv: list[str]) -> bool:
    """Whether a process with this ``argv`` is a launcher or a shell (``bash -c``, ``torchrun``,
    ``python /usr/bin/accelerate launch``, ``python -m deepspeed.launcher.launch``)."""
    if not argv:
        return False
    if _LAUNCHER.search(argv[0]):
        return True
    if not _PYTHON.search(argv[0]):
        return False
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:]  # the interpreter's own flags (-u, -S, -I, ...)
    if len(rest) >= 2 and rest[0] == "-m":
        return rest[1] in _LAUNCHER_MODULES
    return bool(rest) and bool(_LAUNCHER.search(rest[0]))


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def process_tree() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every live (not zombie) process; {} without procfs."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    tree: dict[int, tuple[int, int]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] not in (b"Z", b"X"):
            tree[pid] = (int(fields[1]), int(fields[2]))
    return tree


def save_targets(leader: int) -> tuple[list[int], list[int]]:
    """``(groups, pids)`` that a save signal for the launcher's stage led by ``leader`` goes
    to: the groups of its descendants outside its own (ranks in sessions of their own); when
    there are none, the ranks in its own group, by pid."""
    tree = process_tree()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in tree.items():
        children.setdefault(ppid, []).append(pid)
    own = tree[leader][1] if leader in tree else leader
    groups: list[int] = []
    pids: list[int] = []
    todo = list(children.get(leader, []))
    while todo:
        pid = todo.pop()
        pgid = tree[pid][1]
        if pgid != own:
            if pgid not in groups:
                groups.append(pgid)
        elif not is_launcher(_argv(pid)):
            pids.append(pid)
            continue  # a rank: what it started (data loader workers) is its own business
        todo.extend(children.get(pid, []))
    return (groups, []) if groups else ([], sorted(pids))
