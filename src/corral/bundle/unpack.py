"""Receive and unpack a bundle (the node's side).

:class:`Receiver` keeps the bytes of one bundle as they arrive, in order, at any offset the
sender resumes from (``<dir>/<sha256>.part``), hashes them as they come, and makes the file
``<dir>/<sha256>.tar.gz`` only when the size and the sha256 are right: a bundle that is there
is a verified one. :func:`extract` unpacks it with tarfile's ``data`` filter (no absolute
paths, no ``..``, no links out of the target, no devices).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from corral.bundle import DIFF_MEMBER, FILES_PREFIX, WORK_PREFIX
from corral.errors import BadInput

CHUNK = 1024 * 1024


class Mismatch(BadInput):
    """The bytes received are not the bundle that was announced (size or sha256)."""


def sha256_of(path: Path, upto: int | None = None) -> hashlib._Hash:
    h = hashlib.sha256()
    left = upto
    with open(path, "rb") as f:
        while left is None or left > 0:
            data = f.read(CHUNK if left is None else min(CHUNK, left))
            if not data:
                break
            h.update(data)
            if left is not None:
                left -= len(data)
    return h


class Receiver:
    """One bundle being received into ``directory`` (thread-safe; one writer at a time)."""

    def __init__(self, directory: str | Path, sha256: str, size: int):
        self.dir = Path(directory)
        self.sha256 = sha256
        self.size = size
        self.dir.mkdir(parents=True, exist_ok=True)
        self.final = self.dir / f"{sha256}.tar.gz"
        self.part = self.dir / f"{sha256}.part"
        self._lock = threading.Lock()
        self._hash = hashlib.sha256()
        self.received = 0
        if not self.complete and self.part.exists():  # an earlier agent got this far
            have = min(self.part.stat().st_size, size)
            self._hash = sha256_of(self.part, have)
            self.received = have

    @property
    def complete(self) -> bool:
        try:
            return self.final.stat().st_size == self.size
        except OSError:
            return False

    def reset(self) -> None:
        """Forget a partial bundle (a download from storage starts from its first byte)."""
        with self._lock:
            if not self.complete:
                self.part.unlink(missing_ok=True)
                self.received, self._hash = 0, hashlib.sha256()

    def write(self, offset: int, chunks: Callable[[], bytes]) -> int:
        """Append what ``chunks()`` returns (until it returns b"") at ``offset``, which must be
        where the bytes received so far end (:class:`BadInput` otherwise: the sender resumes
        from :attr:`received`). Returns the new :attr:`received`; the bundle is verified and
        made final once all ``size`` bytes are in (:class:`Mismatch` if they are wrong)."""
        with self._lock:
            if self.complete:
                while chunks():  # drain: the sender need not know it was already here
                    pass
                return self.size
            if offset != self.received:
                raise BadInput(f"upload offset {offset}: the bundle has {self.received} bytes")
            mode = "r+b" if self.part.exists() else "wb"
            with open(self.part, mode) as f:
                f.seek(offset)
                f.truncate()
                while data := chunks():
                    if self.received + len(data) > self.size:
                        raise Mismatch(f"the upload is longer than the bundle's {self.size} bytes")
                    f.write(data)
                    self._hash.update(data)
                    self.received += len(data)
            if self.received == self.size:
                self._finish()
            return self.received

    def _finish(self) -> None:
        got = self._hash.hexdigest()
        if got != self.sha256:
            self.part.unlink(missing_ok=True)
            self.received, self._hash = 0, hashlib.sha256()
            raise Mismatch(f"the bundle received has sha256 {got}, not {self.sha256}")
        os.replace(self.part, self.final)


@dataclass
class Unpacked:
    """What :func:`extract` found besides the workdir."""

    files: dict[str, Path] = field(default_factory=dict)
    diff: bytes | None = None
    members: int = 0


def _inside(name: str, prefix: str) -> str | None:
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    return rest or None


def extract(archive: str | Path, workdir: str | Path, files_dir: str | Path) -> Unpacked:
    """Unpack ``archive``: ``work/`` into ``workdir``, ``files/<n>`` into ``files_dir/<n>``
    (the caller puts them where the spec says), ``git.diff`` returned as bytes. Unsafe members
    are :class:`BadInput` (tarfile's ``data`` filter)."""
    workdir, files_dir = Path(workdir), Path(files_dir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = Unpacked()
    try:
        with tarfile.open(archive, mode="r:gz") as tf:
            for member in tf:
                out.members += 1
                if member.name == DIFF_MEMBER and member.isfile():
                    f = tf.extractfile(member)
                    out.diff = f.read() if f is not None else b""
                    continue
                rel = _inside(member.name, WORK_PREFIX)
                if rel is not None:
                    member.name = rel
                    tf.extract(member, workdir, filter="data")
                    continue
                index = _inside(member.name, FILES_PREFIX)
                if index is not None and member.isfile() and "/" not in index:
                    files_dir.mkdir(parents=True, exist_ok=True)
                    member.name = index
                    tf.extract(member, files_dir, filter="data")
                    out.files[index] = files_dir / index
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadInput(f"cannot unpack the code bundle: {exc}") from None
    return out
