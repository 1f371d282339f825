"""Small file and time helpers of the agent: atomic JSON writes and ISO-8601 UTC stamps."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def iso(ts: float) -> str:
    """Unix seconds -> ``2026-11-21T21:30:00.123Z`` (UTC, milliseconds)."""
    whole = int(ts)
    millis = min(999, int((ts - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so a reader sees either the old or the new file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
