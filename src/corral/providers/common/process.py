"""Processes of local instances: start the agent detached, tell whether it lives, stop groups.

A process is identified by (pid, create_time), never by pid alone: pids are reused. A zombie
counts as dead. Process groups are killed only when they are provably ours (see
:func:`members`), so a pgid reused by an unrelated program is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

#: Two reads of one process's create_time agree to well within this (seconds).
CREATE_TIME_TOLERANCE = 0.05
#: psutil derives create_time from the boot time, which /proc gives in whole seconds: a process
#: started just after an instance was created may appear to predate it by up to this much.
CLOCK_SLACK = 2.0


@dataclass(frozen=True)
class Group:
    """A process group an instance owns: the agent's, or one per stage (children.json)."""

    pgid: int
    leader_create_time: float | None = None
    label: str = ""


def spawn_detached(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    out: Path,
    pass_fds: Sequence[int] = (),
) -> tuple[int, float]:
    """Start ``argv`` in its own session (so it outlives us and owns its process group) with
    stdin from /dev/null and stdout+stderr appended to ``out``; it inherits ``pass_fds`` (and
    no other fd). Returns (pid, create_time).

    The child is reaped by a daemon thread blocked in ``wait()``, so a long-lived caller
    collects no zombies and needs no SIGCHLD handler; when the caller exits first, the child
    is re-parented and keeps running.
    """
    with open(out, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    # Not reaped before wait() runs, so the process (maybe a zombie) is still readable here.
    create_time = psutil.Process(proc.pid).create_time()
    threading.Thread(target=proc.wait, name=f"corral-reap-{proc.pid}", daemon=True).start()
    return proc.pid, create_time


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= CREATE_TIME_TOLERANCE


def alive(pid: int | None, create_time: float | None) -> bool:
    """True if the process ``pid`` started at ``create_time`` still runs (zombies do not)."""
    if pid is None:
        return False
    try:
        p = psutil.Process(pid)
        if create_time is not None and not _same(p.create_time(), create_time):
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


Snapshot = dict[int, list[psutil.Process]]


def snapshot() -> Snapshot:
    """Every live (non-zombie) process on the machine, by process group id.

    The caller's own process group is left out: corral never signals itself.
    """
    own = os.getpgrp()
    groups: Snapshot = {}
    for p in psutil.process_iter(["status", "create_time"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.info["create_time"] is None:
            continue
        try:
            pgid = os.getpgid(p.pid)
        except OSError:
            continue
        if pgid != own:
            groups.setdefault(pgid, []).append(p)
    return groups


def members(group: Group, since: float, snap: Snapshot) -> list[psutil.Process]:
    """Live processes of ``group`` that belong to an instance created at ``since``.

    If a process with pid == pgid exists but started at another time than the recorded leader,
    the pgid was reused by an unrelated group: nothing is ours. If the leader is gone, the
    kernel cannot reuse the pgid while members remain, and members started before ``since``
    are left alone anyway.
    """
    if group.leader_create_time is not None:
        try:
            leader_ct = psutil.Process(group.pgid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            leader_ct = None
        if leader_ct is not None and not _same(leader_ct, group.leader_create_time):
            return []
    return [p for p in snap.get(group.pgid, []) if p.info["create_time"] >= since - CLOCK_SLACK]


def live(groups: Iterable[Group], since: float) -> list[psutil.Process]:
    snap = snapshot()
    return [p for g in groups for p in members(g, since, snap)]


def signal_groups(groups: Iterable[Group], since: float, sig: int) -> int:
    """Send ``sig`` to every process of ``groups`` that is ours. Returns how many were live."""
    snap = snapshot()
    count = 0
    for g in groups:
        procs = members(g, since, snap)
        count += len(procs)
        leader_ok = g.leader_create_time is not None and any(p.pid == g.pgid for p in procs)
        if leader_ok:  # the leader is ours: the whole group is, atomically
            try:
                os.killpg(g.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            continue
        for p in procs:  # psutil re-checks each pid's identity before signalling
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    return count


def wait_gone(
    groups: list[Group],
    since: float,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 0.05,
) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for ``groups`` to have no live process; return the rest."""
    deadline = clock() + timeout
    while True:
        left = live(groups, since)
        if not left or clock() >= deadline:
            return left
        sleep(interval)


def stop_groups(
    groups: list[Group],
    since: float,
    grace: float,
    *,
    kill_wait: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[psutil.Process]:
    """SIGTERM ``groups``, wait ``grace`` seconds, SIGKILL what is left and wait up to
    ``kill_wait`` for it to go. Returns the processes still alive after all that."""
    if not signal_groups(groups, since, signal.SIGTERM):
        return []
    left = wait_gone(groups, since, grace, clock=clock, sleep=sleep)
    if not left:
        return []
    signal_groups(groups, since, signal.SIGKILL)
    return wait_gone(groups, since, kill_wait, clock=clock, sleep=sleep)


def find_agent(plan_path: str, since: float) -> tuple[int, float] | None:
    """(pid, create_time) of a live ``... --plan <plan_path>`` process started after
    ``since`` (used to adopt an agent whose launch was interrupted before it was recorded)."""
    for p in psutil.process_iter(["cmdline", "create_time", "status"]):
        cmdline = p.info["cmdline"] or []
        if p.info["status"] == psutil.STATUS_ZOMBIE or cmdline[-2:] != ["--plan", plan_path]:
            continue
        if p.info["create_time"] is not None and p.info["create_time"] >= since - CLOCK_SLACK:
            return p.pid, p.info["create_time"]
    return None
