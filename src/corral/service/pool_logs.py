"""``corral pool logs WORKER [-f]``: a pool worker's own log (the Celery worker and what it
ran), on the box it runs on (the guide's ``logs gpu-worker-0``).

``corral worker`` writes each worker's log to ``<home>/<worker>/<worker>.log`` (home:
``--home``, default ``CORRAL_HOME/worker``). A worker of another box is found in the pool's
registry only by name and host: its log stays there, and the error says which host to ask.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from corral.errors import NotFound
from corral.queue.control import worker_home

#: how often a followed log is looked at
FOLLOW_EVERY_S = 0.2


def worker_log(name: str, home: Path | None = None) -> Path:
    """The log of worker ``name`` on this box; NotFound naming the workers that have one."""
    base = worker_home(home)
    path = base / name / f"{name}.log"
    if path.is_file():
        return path
    here = sorted(p.parent.name for p in base.glob("*/*.log") if p.stem == p.parent.name)
    shown = ", ".join(here) if here else "no worker has run here"
    raise NotFound(
        f"no log of worker {name!r} under {base} ({shown}); a worker's log is on its own box: "
        "run `corral pool logs` there (`corral pool status` shows each worker's host)"
    )


def last_lines(path: Path, count: int) -> tuple[list[str], int]:
    """The last ``count`` lines of the file and the offset of its end."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        block, data = 64 * 1024, b""
        at = end
        while at > 0 and data.count(b"\n") <= count:
            at = max(0, at - block)
            f.seek(at)
            data = f.read(end - at)
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-count:] if count else [], end


def follow(
    path: Path,
    offset: int,
    stop: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """Lines written to the file from ``offset`` on, as they come, until ``stop()``; a file
    that was truncated (rotated) is read again from its start."""
    pending = b""
    while not stop():
        size = path.stat().st_size if path.exists() else 0
        if size < offset:
            offset, pending = 0, b""
        if size > offset:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(size - offset)
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
            continue
        sleep(FOLLOW_EVERY_S)
