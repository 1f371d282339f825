"""A node whose disk fills up: the agent's own records must still be written, and the attempt
must end saying why.

A training script that fills the disk (a checkpoint larger than the space left) makes every
later write on that filesystem fail with ``ENOSPC``: the stage logs, the event file, the
agent's bookkeeping. :class:`DiskGuard` is what the agent's writers share:

* it keeps a small **reserve** file in the state directory from the start, and deletes it at
  the first ``ENOSPC`` (or ``EDQUOT``) any of them sees, so the agent's last records
  (``stage.finished``, ``attempt.finished``) find room;
* it remembers the first such failure, so the attempt's reason says the disk was full;
* :meth:`DiskGuard.check_after_failure` also reads the free space when a stage failed (the
  script's own ``ENOSPC`` is not the agent's to see).

Writers never raise on a full disk: an event is kept in memory and written once there is room
again; a stage log drops what it cannot write and says how much when it can.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

#: the reserve's file in the agent's state directory
RESERVE_FILE = ".disk-reserve"
#: the reserve kept for the agent's own records (events, children.json, its last words)
RESERVE_BYTES = 1024 * 1024
#: a filesystem with less free than this after a failed stage is reported as full
NEARLY_FULL_BYTES = 4 * 1024 * 1024
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


class DiskGuard:
    """What the agent's writers share about a full disk (thread-safe)."""

    def __init__(self, reserve: str | Path | None = None, size: int = RESERVE_BYTES):
        self._lock = threading.Lock()
        self._reserve = Path(reserve) if reserve is not None else None
        self._size = size
        self._reason: str | None = None
        if self._reserve is not None:
            self._keep_reserve()

    def _keep_reserve(self) -> None:
        assert self._reserve is not None
        try:
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        try:
            try:  # allocated without writing it (fast); else written
                os.posix_fallocate(fd, 0, self._size)
            except OSError as exc:
                if is_full(exc):
                    raise
                chunk = b"\0" * 65536
                for _ in range(max(1, self._size // len(chunk))):
                    os.write(fd, chunk)
        except OSError:  # already full at the start: nothing to keep, nothing to release
            os.close(fd)
            self._release()
            return
        os.close(fd)

    def _release(self) -> None:
        if self._reserve is not None:
            try:
                self._reserve.unlink()
            except OSError:
                pass

    def note(self, exc: BaseException, what: str) -> bool:
        """Record a write that failed; True when it failed because the disk is full (the
        reserve is released then, once)."""
        if not is_full(exc):
            return False
        assert isinstance(exc, OSError)
        with self._lock:
            if self._reason is None:
                self._reason = f"the node's disk is full ({what}: {exc.strerror or exc})"
                self._release()
        return True

    def check_after_failure(self, path: str | Path) -> str | None:
        """The reason to give when a stage failed on a filesystem (almost) out of space: a
        failure noted before, or the free space at ``path`` now."""
        with self._lock:
            if self._reason is not None:
                return self._reason
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            return None
        if usage.free < NEARLY_FULL_BYTES:
            with self._lock:
                if self._reason is None:
                    free_mb = usage.free / 1024**2
                    self._reason = (
                        f"the node's disk is full ({free_mb:.1f} MB free of "
                        f"{usage.total / 1024**3:.1f} GB at {path})"
                    )
                    self._release()
                return self._reason
        return None

    @property
    def reason(self) -> str | None:
        with self._lock:
            return self._reason

    def close(self) -> None:
        self._release()
