"""``corral exec``: commands run on the node through the agent, their output read back in
pieces (``POST /exec``, ``GET /exec/<id>?offset=N``, ``POST /exec/<id>/kill``).

A command is an argv (no shell: ``corral exec RUN -- bash -c '...'`` for one), run in the
job's workdir with the environment a setup command gets (the job's env and secrets, every GPU
of the attempt, never the agent's token), in a session of its own. Its stdout and stderr go,
merged, to a file under the agent's state directory, masked line by line for the job's secret
values like the stage logs; a reader gets whole lines from any offset and, once the command
has ended, its exit code (128 + N for a signal N, 124 when it ran past its timeout: SIGTERM,
then SIGKILL :data:`KILL_GRACE` seconds later). At most :data:`MAX_RUNNING` commands run at
once; a finished one is kept :data:`KEEP_S` seconds for its reader.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from corral.agent import logs

MAX_RUNNING = 4
MAX_ARGS = 256
MAX_ARG_BYTES = 8 * 1024
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 6 * 3600.0
KILL_GRACE = 5.0
KEEP_S = 900.0
TIMED_OUT = 124


class ExecError(Exception):
    """A request the sessions refuse: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Session:
    id: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    path: Path
    started: float
    timeout_s: float
    ended: float | None = None
    exit_code: int | None = None
    timed_out: bool = False
    killed: bool = False
    pump: threading.Thread | None = field(default=None, repr=False)


def check_argv(argv: Any) -> list[str]:
    if not isinstance(argv, list) or not argv:
        raise ExecError(400, "argv must be a non-empty list of strings")
    if len(argv) > MAX_ARGS:
        raise ExecError(400, f"argv has more than {MAX_ARGS} items")
    for arg in argv:
        if not isinstance(arg, str) or "\x00" in arg or len(arg.encode()) > MAX_ARG_BYTES:
            raise ExecError(400, "every argv item must be a string without NUL, up to 8 KiB")
    return list(argv)


def _pump(pipe: IO[bytes], path: Path, mask: list[bytes]) -> None:
    """Copy ``pipe`` into ``path`` line by line, each line masked (a line over
    :data:`logs.MAX_LINE` bytes is written in pieces)."""
    ordered = sorted(mask, key=len, reverse=True)

    def masked(data: bytes) -> bytes:
        for value in ordered:
            data = data.replace(value, b"***")
        return data

    buf = b""
    with open(path, "ab") as out:
        while True:
            chunk = pipe.read1(64 * 1024) if hasattr(pipe, "read1") else pipe.read(64 * 1024)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf or len(buf) > logs.MAX_LINE:
                cut = buf.find(b"\n") + 1 or logs.MAX_LINE
                out.write(masked(buf[:cut]))
                buf = buf[cut:]
            out.flush()
        if buf:
            out.write(masked(buf) + b"\n")
    pipe.close()


class ExecSessions:
    def __init__(
        self,
        directory: Path,
        cwd: str,
        env: Callable[[], dict[str, str]],
        mask: list[bytes],
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.directory = Path(directory)
        self.cwd = cwd
        self._env = env
        self._mask = [m for m in mask if m]
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def start(self, argv: Any, timeout_s: Any = None) -> dict[str, Any]:
        argv = check_argv(argv)
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ExecError(400, "timeout_s must be a number of seconds")
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ExecError(400, f"timeout_s must be above 0 and at most {MAX_TIMEOUT_S:g}")
        with self._lock:
            self._forget_old()
            running = [s for s in self._sessions.values() if s.exit_code is None]
            if len(running) >= MAX_RUNNING:
                raise ExecError(429, f"{MAX_RUNNING} commands already run: wait for one to end")
            self.directory.mkdir(parents=True, exist_ok=True)
            sid = secrets.token_hex(8)
            path = self.directory / f"{sid}.log"
            path.touch(mode=0o600)
            cwd = self.cwd if os.path.isdir(self.cwd) else None
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=self._env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ExecError(
                    422, f"cannot run {argv[0]!r}: {exc.strerror or type(exc).__name__}"
                ) from None
            session = Session(sid, argv, proc, path, self._clock(), float(timeout))
            assert proc.stdout is not None
            session.pump = threading.Thread(
                target=_pump, args=(proc.stdout, path, self._mask), name=f"exec:{sid}", daemon=True
            )
            session.pump.start()
            self._sessions[sid] = session
        threading.Thread(target=self._watch, args=(session,), daemon=True).start()
        return {"id": sid, "pid": proc.pid}

    def _watch(self, s: Session) -> None:
        try:
            code = s.proc.wait(timeout=s.timeout_s)
        except subprocess.TimeoutExpired:
            s.timed_out = True
            self._signal(s, signal.SIGTERM)
            try:
                code = s.proc.wait(timeout=KILL_GRACE)
            except subprocess.TimeoutExpired:
                self._signal(s, signal.SIGKILL)
                code = s.proc.wait()
        if s.pump is not None:
            s.pump.join(10)
        with self._lock:
            s.exit_code = TIMED_OUT if s.timed_out else (128 - code if code < 0 else code)
            s.ended = self._clock()

    @staticmethod
    def _signal(s: Session, sig: int) -> None:
        try:
            os.killpg(s.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _get(self, sid: str) -> Session:
        with self._lock:
            s = self._sessions.get(sid)
        if s is None:
            raise ExecError(404, f"no command {sid!r} (finished ones are kept {KEEP_S:g} s)")
        return s

    def read(self, sid: str, offset: int, limit: int) -> dict[str, Any]:
        s = self._get(sid)
        with self._lock:
            exit_code, timed_out = s.exit_code, s.timed_out
        data, next_offset = logs.read_chunk(s.path, offset, limit)
        done = exit_code is not None and next_offset >= logs.log_size(s.path)
        return {
            "id": sid,
            "offset": offset,
            "next_offset": next_offset,
            "data": data.decode("utf-8", errors="replace"),
            "done": done,
            "exit_code": exit_code if done else None,
            "timed_out": timed_out,
        }

    def kill(self, sid: str) -> dict[str, Any]:
        s = self._get(sid)
        if s.exit_code is None:
            s.killed = True
            self._signal(s, signal.SIGTERM)
            timer = threading.Timer(KILL_GRACE, self._signal, (s, signal.SIGKILL))
            timer.daemon = True
            timer.start()
        return {"id": sid, "killing": s.exit_code is None}

    def _forget_old(self) -> None:
        now = self._clock()
        for sid, s in list(self._sessions.items()):
            if s.ended is not None and now - s.ended > KEEP_S:
                del self._sessions[sid]
                s.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Kill every command still running (the agent is going away)."""
        with self._lock:
            running = [s for s in self._sessions.values() if s.exit_code is None]
        for s in running:
            self._signal(s, signal.SIGKILL)
