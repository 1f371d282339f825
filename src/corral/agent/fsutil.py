"""Small file and time helpers of the agent: atomic JSON writes and ISO-8601 UTC stamps."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from corral.wire.node import iso  # the wire's time format, shared with node hooks

__all__ = ["atomic_write_json", "iso"]


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so a reader sees either the old or the new file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
