"""One controller per CORRAL_HOME: an exclusive ``flock`` on ``controller.lock`` held for the
controller's lifetime (released by the kernel if the process dies, even on kill -9)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from corral import paths
from corral.files import write_atomic

LOCK_FILE = "controller.lock"
PID_FILE = "controller.pid"


class ControllerLock:
    def __init__(self, home: Path | None = None):
        self.home = home or paths.home()
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock without blocking; False if another controller holds it."""
        fd = os.open(self.home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        write_atomic(self.home / PID_FILE, str(os.getpid()), mode=0o644, fsync=False)
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            (self.home / PID_FILE).unlink(missing_ok=True)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def running_pid(home: Path | None = None) -> int | None:
    """PID of the controller holding the lock for this home, or None if none runs."""
    home = home or paths.home()
    lock_path = home / LOCK_FILE
    if not lock_path.exists():
        return None
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int((home / PID_FILE).read_text().strip())
            except (OSError, ValueError):
                return -1  # held, pid file not written yet
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
