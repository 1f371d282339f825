"""Weights & Biases sink. ``wandb`` is imported only when this tracker is built.

The W&B run id is ``$CORRAL_RUN_ID`` (made W&B-safe) with ``resume="allow"``, so every attempt
of a corral run (after a preemption or a crash) continues the same W&B run. ``mode="offline"``
(or ``WANDB_MODE=offline``) works with no network: the run is written under ``dir``
(default: the run dir, see :func:`corral.sdk.config.run_dir`) and uploaded later with
``wandb sync``.

The training step is logged as the metric ``global_step``, the x-axis of every other metric
(``define_metric``), not as W&B's own ``step``: W&B drops what is logged at a step below the
run's last one, which is what a resumed attempt does from its checkpoint's step on (the steps
between that checkpoint and the preemption come again). Each ``log`` call is one W&B row.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from corral.sdk.trackers.base import Tracker, table_columns
from corral.wire.env import ENV_RUN_ID

__all__ = ["STEP_METRIC", "WandbTracker", "wandb_run_id"]

#: The metric that holds the training step, every other metric's x-axis.
STEP_METRIC = "global_step"


def wandb_run_id(run_id: str) -> str:
    """``run_id`` with the characters W&B refuses in ids (``/\\#?%:`` and spaces) replaced."""
    return re.sub(r"[/\\#?%:\s]", "-", run_id)[:128]


class WandbTracker(Tracker):
    def __init__(
        self,
        project: str | None = None,
        *,
        mode: str | None = None,
        run_id: str | None = None,
        dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        entity: str | None = None,
        config: dict[str, Any] | None = None,
        tags: list[str] | None = None,
    ):
        import wandb

        self._wandb = wandb
        run_id = run_id or os.environ.get(ENV_RUN_ID) or None
        if dir is None:
            from corral.sdk.config import run_dir

            dir = run_dir()
        Path(dir).mkdir(parents=True, exist_ok=True)
        self.run_id = wandb_run_id(run_id) if run_id else None
        self.run = wandb.init(
            project=project,
            entity=entity,
            id=self.run_id,
            name=name or run_id,
            resume="allow" if self.run_id else None,
            dir=os.fspath(dir),
            mode=mode,  # type: ignore[arg-type]
            config=config,
            tags=tags,
        )
        self.dir = Path(dir)
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        # keys as text: W&B refuses a whole call with one non-string key
        row = {str(k): v for k, v in metrics.items()}
        row[STEP_METRIC] = int(step)
        self.run.log(row)

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        columns = table_columns(rows)
        data = [[_cell(row.get(c)) for c in columns] for row in rows]
        table = self._wandb.Table(columns=[str(c) for c in columns], data=data)
        self.run.log({str(name): table, STEP_METRIC: int(step)})

    def finish(self) -> None:
        self.run.finish()

    def __repr__(self) -> str:
        return f"WandbTracker(run_id={self.run_id!r})"


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except Exception:
            pass
    return str(value)
