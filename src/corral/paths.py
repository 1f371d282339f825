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


def kept_machine_log(run_id: str, attempt: int) -> Path:
    """The tail of the console log of an attempt's machine, kept by the controller when the
    attempt ended before its agent served (its provider may drop the log with the machine)."""
    return home() / "runs" / run_id / "machine" / f"a{attempt}.log"
