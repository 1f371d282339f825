"""Stage logs: a pump that copies a child's merged stdout/stderr into a file with a timestamp
on every line, and a reader that serves byte ranges of those files without splitting lines.

Every line written is ``<ISO-8601 UTC> <text>\\n``. A partial last line is written (with a
newline) when the pipe closes; a line longer than ``MAX_LINE`` bytes is cut into several lines.
A progress bar redraws itself with ``\\r`` and may write no newline for a whole epoch: the
redraws waiting for one are written once they are ``REDRAW_FLUSH_S`` old, up to and with the
last ``\\r`` (a line ending ``\\r\\n``), so that the log shows them as they come and with
the time they came.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from corral.agent.diskfull import DiskGuard
from corral.wire.node import iso

MAX_LINE = 64 * 1024
#: Seconds after which a bar's redraws waiting for a newline are written.
REDRAW_FLUSH_S = 1.0
DEFAULT_LIMIT = 256 * 1024
MAX_LIMIT = 4 * 1024 * 1024


class LogTap(Protocol):
    """Sees the child's output as the pump reads it (e.g. progress read from the log)."""

    def feed(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class LogPump:
    """Copies ``pipe`` into ``path`` (appending) on its own thread until EOF; a ``tap`` gets
    every chunk read, then ``close()`` at EOF (its failures never stop the copy)."""

    def __init__(
        self,
        pipe: IO[bytes],
        path: str | Path,
        now: Callable[[], float] = time.time,
        max_line: int = MAX_LINE,
        mask: list[bytes] | None = None,
        tap: LogTap | None = None,
        disk: DiskGuard | None = None,
        redraw_flush: float = REDRAW_FLUSH_S,
    ):
        self._tap = tap
        #: a full disk: the pump keeps reading (the stage never blocks on its pipe), drops
        #: what it cannot write, and says how much once it can write again
        self._disk = disk
        self._lost = 0
        self._torn = False
        self._redraw_flush = redraw_flush
        self._mask = sorted(mask or [], key=len, reverse=True)  # longest first
        self._fd = pipe.fileno()
        self._pipe = pipe
        self._path = Path(path)
        self._now = now
        self._max_line = max_line
        self._thread = threading.Thread(
            target=self._run, name=f"log:{self._path.name}", daemon=True
        )

    def start(self) -> LogPump:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _masked(self, line: bytes) -> bytes:
        for value in self._mask:
            line = line.replace(value, b"***")
        return line

    def _cut(self, line: bytes) -> list[bytes]:
        """``line`` in pieces of at most ``max_line`` bytes, never inside a character."""
        pieces = []
        while len(line) > self._max_line:
            cut = utf8_boundary(line[: self._max_line]) or self._max_line
            pieces.append(line[:cut])
            line = line[cut:]
        return [*pieces, line]

    def _stamp(self, lines: list[bytes]) -> bytes:
        if self._mask:
            lines = [self._masked(line) for line in lines]
        prefix = (iso(self._now()) + " ").encode()
        return b"".join(prefix + line + b"\n" for line in lines)

    def _run(self) -> None:
        partial = b""
        since: float | None = None  # when the oldest byte of ``partial`` was read
        # unbuffered: every write is flushed anyway, and a failed one leaves nothing behind in
        # a buffer to be written twice
        with open(self._path, "ab", buffering=0) as out:
            while True:
                try:
                    chunk = os.read(self._fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                self._tapped(chunk)
                *complete, partial = (partial + chunk).split(b"\n")
                lines = [piece for line in complete for piece in self._cut(line)]
                if len(partial) > self._max_line:
                    *more, partial = self._cut(partial)
                    lines.extend(more)
                now = self._now()
                if not partial or complete:
                    since = now if partial else None
                elif since is None:
                    since = now
                elif b"\r" in partial and now - since >= self._redraw_flush:
                    redrawn = partial.rfind(b"\r") + 1  # the redraws so far, the last \r with them
                    lines.append(partial[:redrawn])
                    partial = partial[redrawn:]
                    since = now if partial else None
                if lines:
                    self._write(out, self._stamp(lines))
            if partial:
                self._write(out, self._stamp([partial]))
        self._tapped(None)
        try:
            self._pipe.close()
        except OSError:
            pass

    def _write(self, out: IO[bytes], data: bytes) -> None:
        """Write ``data`` whole, or as much as fits and count the rest as lost (a full disk);
        the first write that fits again starts with a line saying how much was lost."""
        if self._lost:
            note = f"corral: {self._lost} bytes of output lost: the disk was full"
            data = (b"\n" if self._torn else b"") + self._stamp([note.encode()]) + data
        view = memoryview(data)
        try:
            while view:
                n = out.write(view) or 0
                view = view[n:]
        except OSError as exc:
            if self._disk is not None:
                self._disk.note(exc, f"the log {self._path.name}")
            self._torn = len(view) < len(data)
            self._lost += len(view)
            return
        self._lost, self._torn = 0, False

    def _tapped(self, chunk: bytes | None) -> None:
        if self._tap is None:
            return
        try:
            if chunk is None:
                self._tap.close()
            else:
                self._tap.feed(chunk)
        except Exception:  # the log is copied whatever the tap does
            pass


def utf8_boundary(data: bytes) -> int:
    """The largest ``n`` such that ``data[:n]`` does not end inside a UTF-8 character."""
    cut = len(data)
    # Back off over continuation bytes (10xxxxxx), then over the lead byte they belong to.
    while cut > 0 and len(data) - cut < 3 and (data[cut - 1] & 0xC0) == 0x80:
        cut -= 1
    if cut > 0 and data[cut - 1] >= 0xC0:
        lead = data[cut - 1]
        width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if len(data) - (cut - 1) < width:
            return cut - 1
    return len(data)


def log_size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def read_chunk(path: str | Path, offset: int, limit: int = DEFAULT_LIMIT) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of ``path`` from ``offset``, and the offset to continue from.

    The chunk ends after its last newline when it has one, so lines (and the multibyte
    characters in them) are never split; a chunk without a newline (one line longer than
    ``limit``, or a line being written) is cut before an incomplete UTF-8 character instead.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        return b"", offset
    if not data:
        return b"", offset
    newline = data.rfind(b"\n")
    if newline >= 0:
        data = data[: newline + 1]
    else:
        cut = utf8_boundary(data)
        if cut > 0 or len(data) < limit:  # nothing whole yet: wait for the rest of the line
            data = data[:cut]
    return data, offset + len(data)
