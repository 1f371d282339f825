"""Child processes of the agent: each setup command and stage runs in its own process group.

A :class:`Child` is one ``bash -c`` command under the stage shim (``shim.py``: it keeps the
job's exit code, e.g. 75, through a stop), started with ``start_new_session`` (so the shim's pid
is the process-group id), its output pumped into a log, and a watcher thread that

1. waits for the leader to exit and records its exit code (a signal death is ``128+signum``);
2. gives whatever the leader left in its group the same grace: SIGTERM, then SIGKILL at the
   deadline (a deadline already set by :meth:`Child.terminate` is kept);
3. waits (bounded) for the log pump to drain, then calls ``on_exit(child)``.

So a child is "done" only when its whole process group is gone and its log is complete.

A stop (:meth:`Child.terminate`) follows the stage's stop settings: with a ``save_command``
and/or ``save_signal`` the job is first asked to save (the command runs, the signal is sent),
which takes at most half the grace (less if the job exits); then ``stop_signal`` (default
SIGTERM) goes to the group, and SIGKILL at the end of the grace. A multi-GPU launcher
(``launcher=True``: torchrun and the like start each rank in a session of its own) gets the
stop signal itself, as it forwards it to its ranks, while the save signal goes to the ranks
(their groups, or, for a launcher that keeps them in its own, each of them: ``ranks.py``), not
to the launcher (which would die of a SIGUSR1); SIGKILL reaches the ranks' groups as well.
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

from corral.agent import ranks
from corral.agent.diskfull import DiskGuard
from corral.agent.logs import LogPump, LogTap
from corral.wire.node import iso

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
    tree = ranks.process_tree()
    if not tree:  # no procfs (macOS)
        return None
    return [pid for pid, (_, group) in tree.items() if group == pgid]


def descendant_groups(pid: int) -> list[int]:
    """Process groups of ``pid``'s live descendants other than its own (ranks started in a
    session of their own); [] without procfs."""
    parent = ranks.process_tree()
    if not parent:
        return []
    children: dict[int, list[int]] = {}
    for child, (ppid, _) in parent.items():
        children.setdefault(ppid, []).append(child)
    own = parent[pid][1] if pid in parent else pid
    todo, groups = [pid], []
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            pgid = parent[child][1]
            if pgid != own and pgid not in groups:
                groups.append(pgid)
    return groups


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
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
        tap: LogTap | None = None,
        stop_signal: int = signal.SIGTERM,
        save_signal: int | None = None,
        save_command: str | None = None,
        launcher: bool = False,
        disk: DiskGuard | None = None,
        cleanup: list[str] | None = None,
    ):
        self.name = name
        self.grace = grace
        self.stop_signal = stop_signal
        self.save_signal = save_signal
        self.save_command = save_command
        self.launcher = launcher
        # what the save command needs: the stage's directory, environment and log
        self._cwd, self._env, self._log_path = cwd, env, log_path
        self._now, self._mask = now, mask
        self._gone = threading.Event()  # the whole group has exited
        self.exit_code: int | None = None
        self.terminated = False  # terminate() was called
        self.stopped = False  # terminate() was called before the leader exited
        self._on_exit = on_exit
        #: run after the group is gone (a stage's container removed: its engine's client may
        #: have been killed); in children.json too, for a provider that stops a dead agent's
        self.cleanup = cleanup
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
        self._pump = LogPump(
            self.proc.stdout, log_path, now=now, mask=mask, tap=tap, disk=disk
        ).start()
        self.create_time = _create_time(self.pid)
        self._watcher = threading.Thread(target=self._watch, name=f"watch:{name}", daemon=True)
        self._watcher.start()

    def terminate(self, save: bool = True) -> None:
        """Stop the group: ask it to save first (``save``, when the stage has a save command
        or signal), then the stop signal, and SIGKILL at the end of the grace. Idempotent."""
        with self._lock:
            if self.terminated:
                return
            self.terminated = True
            self._kill_at = self._clock() + self.grace
        if save and (self.save_signal is not None or self.save_command):
            threading.Thread(
                target=self._save_then_stop, name=f"save:{self.name}", daemon=True
            ).start()
        else:
            signal_group(self.pgid, self.stop_signal)

    def _save_then_stop(self) -> None:
        until = self._clock() + self.grace / 2
        if self.save_signal is not None:
            groups, pids = ranks.save_targets(self.pid) if self.launcher else ([self.pgid], [])
            for group in groups:
                signal_group(group, self.save_signal)
            for pid in pids:
                signal_pid(pid, self.save_signal)
        if self.save_command:
            self._run_save_command(until)
        if self.save_signal is not None:
            self._gone.wait(max(0.0, until - self._clock()))
        if not self._gone.is_set():
            signal_group(self.pgid, self.stop_signal)

    def _run_save_command(self, until: float) -> None:
        """``save_command`` in the workdir with the stage's environment, its output in the
        stage's log; killed (its whole group) if it outlasts ``until``."""
        try:
            proc = subprocess.Popen(
                ["bash", "-c", self.save_command or ""],
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            with open(self._log_path, "a", encoding="utf-8") as log:
                log.write(f"{iso(self._now())} corral: save_command could not start: {exc}\n")
            return
        assert proc.stdout is not None
        pump = LogPump(proc.stdout, self._log_path, now=self._now, mask=self._mask).start()
        try:
            proc.wait(max(0.0, until - self._clock()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        pump.join(LOG_DRAIN_SECONDS)

    def _watch(self) -> None:
        try:
            self._watch_group()
            self._gone.set()
            self._pump.join(LOG_DRAIN_SECONDS)
            if self.cleanup:
                run_quietly(self.cleanup)
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
                self.terminate(save=False)  # the leader is gone: its leftovers get the grace
            with self._lock:
                due = self._kill_at is not None and self._clock() >= self._kill_at
                kill, self._killed = due and not self._killed, self._killed or due
            if kill:  # the ranks' groups first: they are found through the leader
                for group in [*descendant_groups(self.pid), self.pgid]:
                    signal_group(group, signal.SIGKILL)
            self._sleep(WATCH_SECONDS if returncode is None else LINGER_SECONDS)

    def join(self, timeout: float | None = None) -> bool:
        self._watcher.join(timeout)
        return not self._watcher.is_alive()

    def record(self) -> dict:
        """This child's entry in ``children.json``."""
        entry = {"stage": self.name, "pgid": self.pgid, "create_time": self.create_time}
        return {**entry, "cleanup": self.cleanup} if self.cleanup else entry


def run_quietly(argv: list[str], timeout: float = 60.0) -> None:
    """Run a cleanup command, its output and failure ignored (what it ends may be gone)."""
    try:
        subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass


def _create_time(pid: int) -> float | None:
    try:
        import psutil  # imported here: not needed before the first child runs

        return psutil.Process(pid).create_time()
    except Exception:  # the process may already be gone
        return None
