"""Machine-wide GPU locks: one lock file per device, shared by every corral home on a machine.

An agent host's own records keep one home from giving a GPU twice; two homes (two users, or
one user with two ``CORRAL_HOME``s) do not see each other's records. So a launch also takes an
exclusive ``flock`` on ``<dir>/<namespace>-<gpu id>.lock`` for each GPU it gets and hands the
open file to the agent it starts (``pass_fds``): the agent holds the lock for its whole life,
and the kernel releases it when the agent exits, is terminated or is killed with SIGKILL.

Another home sees a GPU whose lock is held as busy. A worker of the GPU pool
(``corral worker``) holds the locks of its GPUs for its whole life, so the local provider never
hands out a GPU the pool serves. The lock files are opened read-only and
created mode 0644 in a sticky, world-writable directory, so users can lock each other's files
but not replace them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from corral.errors import NoCapacity, ProviderError

#: Directory of the machine-wide GPU lock files, shared by every user and CORRAL_HOME of this
#: machine (default /tmp/corral-gpus). Only tests and unusual setups change it.
ENV_GPU_LOCK_DIR = "CORRAL_GPU_LOCK_DIR"
DEFAULT_GPU_LOCK_DIR = Path("/tmp/corral-gpus")

#: How long an acquisition retries a lock that a probe of another process holds for a moment.
ACQUIRE_PATIENCE_S = 0.5

_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def gpu_lock_dir() -> Path:
    """``CORRAL_GPU_LOCK_DIR`` if set, else ``/tmp/corral-gpus`` (not ``$TMPDIR`` nor
    ``$XDG_RUNTIME_DIR``: those can differ between users, and the lock must not)."""
    raw = os.environ.get(ENV_GPU_LOCK_DIR, "").strip()
    return Path(raw) if raw else DEFAULT_GPU_LOCK_DIR


class DeviceLocks:
    """The lock files of one device namespace (``"gpu"`` for real GPUs, ``"fake"`` for a
    declared inventory) in a machine-wide directory."""

    def __init__(self, directory: Path, namespace: str = "gpu") -> None:
        self.directory = Path(directory)
        self.namespace = _SAFE.sub("_", namespace)

    def path(self, device: str) -> Path:
        return self.directory / f"{self.namespace}-{_SAFE.sub('_', device)}.lock"

    def _open(self, device: str) -> int:
        """An fd (close-on-exec) on the lock file of ``device``, creating the directory and
        file if missing. :class:`ProviderError` naming the path when it cannot be opened."""
        try:
            if not self.directory.is_dir():
                self.directory.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):  # someone else's: theirs to set
                    os.chmod(self.directory, 0o1777)  # every user may add a lock file
            flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path(device), flags, 0o644)
        except OSError as exc:
            raise ProviderError(
                f"cannot open the GPU lock file {self.path(device)}: {exc.strerror}"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ProviderError(f"the GPU lock file {self.path(device)} is not a regular file")
        return fd

    def busy(self) -> set[str]:
        """Ids of devices of this namespace whose lock some process holds now (this one's
        own open locks included)."""
        prefix = f"{self.namespace}-"
        try:
            names = [p.name for p in self.directory.iterdir()]
        except OSError:
            return set()
        out = set()
        for name in names:
            if not (name.startswith(prefix) and name.endswith(".lock")):
                continue
            device = name[len(prefix) : -len(".lock")]
            try:
                fd = os.open(self.directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                out.add(device)
            finally:
                os.close(fd)  # closing drops the probe's shared lock
        return out

    @contextlib.contextmanager
    def hold(self, devices: Iterable[str]) -> Iterator[list[int]]:
        """Lock every one of ``devices`` exclusively and yield the fds (to pass to the agent);
        the fds are closed on exit, so the locks outlive this block only in a process that
        inherited them. :class:`NoCapacity` naming the device if another process holds one."""
        fds: list[int] = []
        try:
            for device in devices:
                fd = self._open(device)
                fds.append(fd)
                if not _lock(fd):
                    raise NoCapacity(
                        f"GPU {device} is held by a run of another corral home on this machine "
                        f"(lock {self.path(device)})",
                        fields={"gpu": device},
                    )
            yield fds
        finally:
            for fd in fds:
                os.close(fd)


def _lock(fd: int, patience: float = ACQUIRE_PATIENCE_S) -> bool:
    """Take an exclusive flock on ``fd``, retrying for ``patience`` seconds (a probe's shared
    lock lasts microseconds; a holder's lasts until it exits)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise ProviderError(f"cannot lock a GPU lock file: {exc.strerror}") from None
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
