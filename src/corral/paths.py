"""Where corral keeps its files (``CORRAL_HOME``, default ``~/.corral``)."""

from __future__ import annotations

import os
from pathlib import Path

from corral.wire.env import ENV_HOME


def home() -> Path:
    """The corral home directory, created on first use."""
    raw = os.environ.get(ENV_HOME) or "~/.corral"
    path = Path(raw).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir(run_id: str) -> Path:
    """Per-run files kept by the controller: copied logs, the resolved spec, checkpoints."""
    path = home() / "runs" / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path
