"""Processes of local instances: start the agent detached, tell whether it lives, stop groups.

A process is identified by (pid, create_time), never by pid alone: pids are reused. A zombie
counts as dead. Process groups are killed only when they are provably ours (see
:func:`members`), so a pgid reused by an unrelated program is never signalled.

Nothing here scans the machine's processes on the common paths: an instance knows its groups
(the agent's, one per stage) by process group id and leader create time, and a group is asked
about directly (its leader, and ``killpg(pgid, 0)`` for "is any member left"). Only a group
whose leader is gone while members remain (a stage that left a background child behind) is
looked up among the machine's processes (:func:`snapshot`), and so is an agent whose launch was
interrupted before it wrote its pid (:func:`find_agent`).

The agents this process starts are reaped by one thread for all of them (:func:`reap`), so a
long-lived controller collects no zombies and holds no thread per agent.
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


def rank_groups(groups: Iterable[Group]) -> list[Group]:
    """Groups of processes below ``groups``' leaders that live in a group of their own (the
    ranks a ``torchrun`` stage starts, each in a session of its own): stopping a machine must
    reach them too. A leader that is not the recorded process is not looked under."""
    found: list[Group] = []
    seen = {g.pgid for g in groups}
    for g in groups:
        try:
            leader = psutil.Process(g.pgid)
            if g.leader_create_time is not None and (
                abs(leader.create_time() - g.leader_create_time) > CLOCK_SLACK
            ):
                continue
            below = leader.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for proc in below:
            try:
                pgid = os.getpgid(proc.pid)
                head = psutil.Process(pgid).create_time() if pgid == proc.pid else None
            except (OSError, psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if pgid not in seen:
                seen.add(pgid)
                found.append(Group(pgid, head, f"{g.label or 'group'}:rank"))
    return found


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

    The child is reaped by this process's one reaper thread (:func:`reap`), so a long-lived
    caller collects no zombies and needs no SIGCHLD handler; when the caller exits first, the
    child is re-parented and keeps running.
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
    # Not reaped before the reaper sees it, so the process (maybe a zombie) is readable here.
    create_time = psutil.Process(proc.pid).create_time()
    reap(proc)
    return proc.pid, create_time


class Reaper:
    """One daemon thread that waits for every child handed to it: it polls them (a
    ``waitpid(pid, WNOHANG)`` each) every :attr:`interval` seconds while any is left, and
    sleeps otherwise. Never ``waitpid(-1)``: other children of the process are not its own."""

    interval = 0.2

    def __init__(self) -> None:
        self._children: list[subprocess.Popen[bytes]] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        with self._cond:
            self._children.append(proc)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="corral-reaper", daemon=True)
                self._thread.start()
            self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._children)

    def poll(self, pid: int) -> None:
        """Reap ``pid`` now if it is one of ours and has ended (a zombie waiting for the next
        round): a group whose only process is our ended child is then gone at once."""
        with self._cond:
            found = [p for p in self._children if p.pid == pid]
        for proc in found:
            proc.poll()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._children:
                    self._cond.wait()
                children = list(self._children)
            ended = [p for p in children if p.poll() is not None]
            if ended:
                with self._cond:
                    self._children = [p for p in self._children if p not in ended]
            time.sleep(self.interval)


_reaper = Reaper()


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Have ``proc`` (a child of this process) reaped once it ends, by the one reaper."""
    _reaper.add(proc)


def _exists(group: Group) -> bool:
    """Whether any process is left in ``group`` (our own ended child reaped first)."""
    if not _group_exists(group.pgid):
        return False
    _reaper.poll(group.pgid)
    return _group_exists(group.pgid)


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


#: what :func:`_leader` says of a leader that has ended but is not reaped yet by a live parent
ENDING = "ending"


def _leader(group: Group, since: float) -> psutil.Process | bool | str | None:
    """The group's leader if it lives and is provably the instance's (its recorded create
    time; without one, started after ``since``); False if the pgid names another process
    (reused, or older than the instance: nothing of this group is ours); :data:`ENDING` for a
    zombie whose parent (not init) will reap it in a moment; None if there is no live leader
    (gone, or a zombie left to init)."""
    try:
        leader = psutil.Process(group.pgid)
        ct = leader.create_time()
        if group.leader_create_time is not None:
            if not _same(ct, group.leader_create_time):
                return False
        elif ct < since - CLOCK_SLACK:
            return False
        if leader.status() == psutil.STATUS_ZOMBIE:
            _reaper.poll(group.pgid)  # our own ended child: reaped now
            return ENDING if leader.ppid() > 1 and psutil.pid_exists(leader.ppid()) else None
        return leader
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _group_exists(pgid: int) -> bool:
    """Whether any process (a zombie included) is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_left(group: Group, since: float) -> bool:
    """Whether any process of ``group`` that belongs to an instance created at ``since`` is
    still there. Asked of the group itself (its leader, then ``killpg(pgid, 0)``); the
    machine's processes are looked through only when the leader is gone (or a zombie left
    to init) but the group is not: a stage that left a background child behind."""
    if group.pgid == os.getpgrp():
        return False  # corral never counts (or signals) its own group
    leader = _leader(group, since)
    if leader is False or not _exists(group):
        return False
    if leader is not None:
        return True  # alive, or ended and about to be reaped by its parent
    return bool(members(group, since, snapshot()))


def live(groups: Iterable[Group], since: float) -> list[Group]:
    """The groups that still have a process of the instance created at ``since``."""
    return [g for g in groups if group_left(g, since)]


def signal_groups(groups: Iterable[Group], since: float, sig: int) -> int:
    """Send ``sig`` to every group of ``groups`` that is ours and still has a process: the
    whole group at once when its leader is the recorded one, else each member found (see
    :func:`members`). Returns how many groups were signalled."""
    count = 0
    for g in groups:
        if g.pgid == os.getpgrp():
            continue
        leader = _leader(g, since)
        if leader is False or not _exists(g):
            continue
        if isinstance(leader, psutil.Process) or leader == ENDING:
            try:  # the leader is ours: the whole group is, atomically
                os.killpg(g.pgid, sig)
                count += 1
            except (ProcessLookupError, PermissionError):
                pass
            continue
        procs = members(g, since, snapshot())
        count += bool(procs)
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
) -> list[Group]:
    """Wait up to ``timeout`` seconds for ``groups`` to have no live process; return the
    groups that still have one. Looked at after 5 ms, then twice as long each time up to
    ``interval`` (a process that exits at once is seen gone at once)."""
    deadline = clock() + timeout
    pause = min(0.005, interval)
    while True:
        left = live(groups, since)
        if not left or clock() >= deadline:
            return left
        sleep(pause)
        pause = min(pause * 2, interval)


def stop_groups(
    groups: list[Group],
    since: float,
    grace: float,
    *,
    kill_wait: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Group]:
    """SIGTERM ``groups``, wait ``grace`` seconds, SIGKILL what is left and wait up to
    ``kill_wait`` for it to go. Returns the groups with a process still alive after all
    that."""
    if not signal_groups(groups, since, signal.SIGTERM):
        return []
    left = wait_gone(groups, since, grace, clock=clock, sleep=sleep)
    if not left:
        return []
    signal_groups(left, since, signal.SIGKILL)
    return wait_gone(left, since, kill_wait, clock=clock, sleep=sleep)


def is_agent(pid: int, plan_path: str, since: float) -> float | None:
    """The create time of process ``pid`` if it is a live ``... --plan <plan_path>`` process
    started after ``since`` (None otherwise): one process looked at, not the machine's."""
    try:
        p = psutil.Process(pid)
        cmdline = p.cmdline()
        ct = p.create_time()
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if cmdline[-2:] != ["--plan", plan_path] or ct < since - CLOCK_SLACK:
        return None
    return ct


def find_agent(plan_path: str, since: float) -> tuple[int, float] | None:
    """(pid, create_time) of a live ``... --plan <plan_path>`` process started after
    ``since``, looked for among all the machine's processes: only to adopt an agent whose
    launch was interrupted before its pid was written anywhere."""
    for p in psutil.process_iter(["cmdline", "create_time", "status"]):
        cmdline = p.info["cmdline"] or []
        if p.info["status"] == psutil.STATUS_ZOMBIE or cmdline[-2:] != ["--plan", plan_path]:
            continue
        if p.info["create_time"] is not None and p.info["create_time"] >= since - CLOCK_SLACK:
            return p.pid, p.info["create_time"]
    return None
