"""Writing files so a reader sees the old content or the new one, never a mix or a torn file.

One helper for every atomic write in corral (the controller's state files, the agent's
records, the SDK's config and state files, provider state): a temporary file with a name of
its own in the target's directory (so several processes may write at once: the last rename
wins), optionally fsynced, then ``os.replace``. The temporary file never survives a failure.
Standard library only: the SDK imports this from training scripts.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomic(
    path: str | Path, data: str | bytes, *, mode: int | None = None, fsync: bool = True
) -> None:
    """Replace ``path`` with ``data`` atomically. ``mode``: the file's permission bits (the
    temporary file's 0600 otherwise, as ``mkstemp`` makes it); ``fsync``: flush to disk
    before the rename (durable across a power loss, not only a crash)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(
    path: str | Path,
    obj: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
    newline: bool = False,
    mode: int | None = None,
    fsync: bool = True,
) -> None:
    """:func:`write_atomic` of ``obj`` as JSON (``json.dumps`` options passed through;
    ``newline`` ends the file with one)."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=default)
    write_atomic(path, text + ("\n" if newline else ""), mode=mode, fsync=fsync)
