"""The always-on JSONL sink: records in the agent's progress file, or a local file.

Target, first that applies: the ``path`` given, ``$CORRAL_PROGRESS_FILE`` (set by the agent,
which tails it for ``/status`` and events), else ``<run dir>/metrics.jsonl`` (see
:func:`corral.sdk.config.run_dir`: ``./corral-run/metrics.jsonl`` for a plain
``python train.py``). Record kinds are those of :mod:`corral.sdk.progress_file` plus ``table``
(``name``, ``step``, ``rows``). Writing never raises into the training loop.
"""

from __future__ import annotations

import os
from typing import Any

from corral.sdk import progress_file
from corral.sdk.trackers.base import Tracker
from corral.wire.env import ENV_PROGRESS_FILE

__all__ = ["JsonlTracker"]


class JsonlTracker(Tracker):
    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = os.fspath(path) if path is not None else None

    def target(self) -> str:
        """The file records go to now (the environment is read on every call)."""
        if self.path:
            return self.path
        env = os.environ.get(ENV_PROGRESS_FILE)
        if env:
            return env
        from corral.sdk.config import run_dir

        return str(run_dir() / "metrics.jsonl")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        progress_file.emit("metrics", file=self.target(), step=step, metrics=dict(metrics))

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        progress_file.emit("table", file=self.target(), name=name, step=step, rows=list(rows))

    def progress(
        self,
        step: int,
        *,
        total: int | None = None,
        loss: float | None = None,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """A ``progress`` record: what the agent shows as the run's step and progress %."""
        fields: dict[str, Any] = {"step": step, "metrics": dict(metrics or {})}
        if total is not None:
            fields["total"] = total
        if loss is not None:
            fields["loss"] = loss
        if epoch is not None:
            fields["epoch"] = epoch
        progress_file.emit("progress", file=self.target(), **fields)

    def checkpoint(self, step: int, path: str, metrics: dict[str, Any] | None = None) -> bool:
        """A ``checkpoint`` record (the agent turns it into a ``checkpoint.saved`` event)."""
        return progress_file.emit(
            "checkpoint", file=self.target(), step=step, path=path, metrics=dict(metrics or {})
        )

    def __repr__(self) -> str:
        return f"JsonlTracker(path={self.path!r})"
