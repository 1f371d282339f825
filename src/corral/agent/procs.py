"""Child processes of the agent: each setup command and stage runs in its own process group.

A :class:`Child` is one ``bash -c`` command under the stage shim (``shim.py``: it keeps the
job's exit code, e.g. 75, through a stop), started with ``start_new_session`` (so the shim's pid
is the process-group id), its output pumped into a log, and a watcher thread that

1. waits for the leader to exit and records its exit code (a signal death is ``128+signum``);
2. gives whatever the leader left in its group the same grace: SIGTERM, then SIGKILL at the
   deadline (a deadline already set by :meth:`Child.terminate` is kept);
3. waits (bounded) for the log pump to drain, then calls ``on_exit(child)``.

So a child is "done" only when its whole process group is gone and its log is complete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from corral.agent.logs import LogPump

#: the group leader of every child: bash under a shim that keeps the exit code through a stop
SHIM = str(Path(__file__).with_name("shim.py"))
WATCH_SECONDS = 0.05  # how often the leader is checked
LINGER_SECONDS = 0.1  # how often a group whose leader is gone is checked (a /proc scan)
LOG_DRAIN_SECONDS = 5.0


def exit_code_of(returncode: int) -> int:
    """Popen's ``-signum`` for a signal death becomes the shell convention ``128+signum``."""
    return 128 - returncode if returncode < 0 else returncode


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in the group. Orphaned zombies count as
    gone: they hold no resources, and their new parent may reap them only much later."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _live_member(pgid)


def _live_member(pgid: int) -> bool:
    members = live_members(pgid)
    return True if members is None else bool(members)


def live_members(pgid: int) -> list[int] | None:
    """Live (not zombie) pids of a process group; None without procfs."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # no procfs (macOS)
        return None
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            out.append(int(pid))
    return out


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Child:
    def __init__(
        self,
        name: str,
        command: str,
        *,
        cwd: str,
        env: dict[str, str],
        log_path: Path,
        grace: float,
        on_exit: Callable[[Child], None],
        now: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        mask: list[bytes] | None = None,
    ):
        self.name = name
        self.grace = grace
        self.exit_code: int | None = None
        self.terminated = False  # terminate() was called
        self.stopped = False  # terminate() was called before the leader exited
        self._on_exit = on_exit
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._kill_at: float | None = None
        self._killed = False
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-I", SHIM, command, str(os.getpid())],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.pgid = self.proc.pid
        assert self.proc.stdout is not None
        self._pump = LogPump(self.proc.stdout, log_path, now=now, mask=mask).start()
        self.create_time = _create_time(self.pid)
        self._watcher = threading.Thread(target=self._watch, name=f"watch:{name}", daemon=True)
        self._watcher.start()

    def terminate(self) -> None:
        """SIGTERM the group now and SIGKILL it after the grace period. Idempotent."""
        with self._lock:
            if self.terminated:
                return
            self.terminated = True
            self._kill_at = self._clock() + self.grace
        signal_group(self.pgid, signal.SIGTERM)

    def _watch(self) -> None:
        try:
            self._watch_group()
            self._pump.join(LOG_DRAIN_SECONDS)
        finally:  # the runner waits for this call: it must come whatever happened here
            self._on_exit(self)

    def _watch_group(self) -> None:
        while True:
            returncode = self.proc.poll()
            if returncode is not None and self.exit_code is None:
                self.stopped = self.terminated
                self.exit_code = exit_code_of(returncode)
            if returncode is not None and not group_alive(self.pgid):
                return
            if returncode is not None and not self.terminated:
                self.terminate()  # the leader is gone: its leftovers get the grace period
            with self._lock:
                due = self._kill_at is not None and self._clock() >= self._kill_at
                kill, self._killed = due and not self._killed, self._killed or due
            if kill:
                signal_group(self.pgid, signal.SIGKILL)
            self._sleep(WATCH_SECONDS if returncode is None else LINGER_SECONDS)

    def join(self, timeout: float | None = None) -> bool:
        self._watcher.join(timeout)
        return not self._watcher.is_alive()

    def record(self) -> dict:
        """This child's entry in ``children.json``."""
        return {"stage": self.name, "pgid": self.pgid, "create_time": self.create_time}


def _create_time(pid: int) -> float | None:
    try:
        import psutil  # imported here: not needed before the first child runs

        return psutil.Process(pid).create_time()
    except Exception:  # the process may already be gone
        return None
