"""Metrics and progress: one ``log(metrics, step)`` interface, many sinks.

The module-level functions use a default tracker set: the JSONL sink (always on: the agent's
progress file, or ``./corral-run/metrics.jsonl`` outside corral) plus the configured extras.
The extras come from, first that applies:

1. ``corral.sdk.trackers.init(trackers=[...])`` or ``init(specs=[{"type": "wandb", ...}])``
   called by the script;
2. ``$CORRAL_TRACKERS``: a JSON list of tracker specs (the job spec's ``trackers``), set by the
   agent, read on the first ``log``/``report``;
3. nothing (a null sink).

::

    from corral.sdk import report, log
    report(step, total=max_steps, loss=loss.item(), lr=lr)   # progress + metrics
    log({"val/cer": cer}, step)                                # metrics only

``report`` writes a ``progress`` record (step, total, loss, metrics) to the JSONL sink and logs
``loss`` and the metrics to the extras. Extras that were built from specs or env are finished at
interpreter exit (``finish()`` does it earlier).

In distributed training these module-level calls act on rank 0 only (``RANK``, else
``LOCAL_RANK``, as torchrun and accelerate set them): on the other ranks they do nothing, so a
script may call them on every rank without eight W&B runs fighting over one id or the stage's
progress file showing whichever rank wrote last (HF's ``is_world_process_zero``, Lightning's
``rank_zero_only``). A :class:`Tracker` used directly logs wherever it is called.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from corral.errors import BadInput
from corral.sdk.config import is_rank_zero
from corral.sdk.trackers.base import CompositeTracker, NullTracker, Tracker
from corral.sdk.trackers.factory import TrackerSpec, make_trackers
from corral.sdk.trackers.jsonl import JsonlTracker
from corral.sdk.trackers.mlflow_sink import MlflowTracker
from corral.sdk.trackers.wandb_sink import WandbTracker
from corral.wire.env import ENV_TRACKERS  # the JSON list of the spec's trackers

__all__ = [
    "ENV_TRACKERS",
    "CompositeTracker",
    "JsonlTracker",
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "TrackerSpec",
    "WandbTracker",
    "checkpoint",
    "default_tracker",
    "finish",
    "init",
    "log",
    "log_table",
    "make_trackers",
    "progress",
    "report",
]

log_ = logging.getLogger("corral.sdk.trackers")
_lock = threading.RLock()
_jsonl = JsonlTracker()
_extras: CompositeTracker | None = None
_atexit_registered = False


def _from_env() -> list[Tracker]:
    raw = os.environ.get(ENV_TRACKERS, "").strip()
    if not raw:
        return []
    try:
        specs = json.loads(raw)
    except json.JSONDecodeError as e:
        log_.warning("%s is not valid JSON (%s); no extra trackers", ENV_TRACKERS, e)
        return []
    if not isinstance(specs, list):
        log_.warning("%s must be a JSON list of tracker specs; no extra trackers", ENV_TRACKERS)
        return []
    try:
        built = make_trackers(specs, strict=False)
    except BadInput as e:
        log_.warning("%s: %s; no extra trackers", ENV_TRACKERS, e)
        return []
    return built.trackers if isinstance(built, CompositeTracker) else []


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(finish)
        _atexit_registered = True


def init(
    trackers: Iterable[Tracker] | None = None,
    *,
    specs: Iterable[Any] | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
) -> CompositeTracker:
    """Configure the default tracker set: ``trackers`` (built by you) plus those ``specs``
    describe. Replaces (and finishes) the extras configured before. Returns the whole set."""
    global _extras, _jsonl
    chosen = list(trackers or ())
    if specs is not None:  # built first: a bad spec leaves the current set as it was
        built = make_trackers(specs)
        chosen += built.trackers if isinstance(built, CompositeTracker) else []
    with _lock:
        if _extras is not None:
            _extras.finish()
        _extras = CompositeTracker(chosen)
        _jsonl = JsonlTracker(jsonl_path)
        _register_atexit()
        return CompositeTracker([_jsonl, *_extras.trackers])


def _current_extras() -> CompositeTracker:
    global _extras
    with _lock:
        if _extras is None:
            _extras = CompositeTracker(_from_env())
            _register_atexit()
        return _extras


def default_tracker() -> CompositeTracker:
    """The JSONL sink plus the extras, as one tracker."""
    extras = _current_extras()
    return CompositeTracker([_jsonl, *extras.trackers])


def log(metrics: dict[str, Any], step: int) -> None:
    """Log ``metrics`` at ``step`` to every tracker of the default set (rank 0 only)."""
    if not is_rank_zero():
        return
    _jsonl.log(metrics, step)
    _current_extras().log(metrics, step)


def log_table(name: str, rows: list[dict[str, Any]], step: int) -> None:
    if not is_rank_zero():
        return
    _jsonl.log_table(name, rows, step)
    _current_extras().log_table(name, rows, step)


def report(
    step: int,
    total: int | None = None,
    loss: float | None = None,
    *,
    epoch: float | None = None,
    **metrics: Any,
) -> None:
    """Progress: a ``progress`` record for the agent (what ``corral status`` shows) and the
    metrics (with ``loss``) for the trackers. Rank 0 only."""
    if not is_rank_zero():
        return
    _jsonl.progress(step, total=total, loss=loss, epoch=epoch, metrics=metrics)
    values = dict(metrics)
    if loss is not None:
        values["loss"] = loss
    if epoch is not None:
        values["epoch"] = epoch
    if values:
        _current_extras().log(values, step)


def progress(
    step: int,
    total: int | None = None,
    loss: float | None = None,
    *,
    epoch: float | None = None,
    **metrics: Any,
) -> None:
    """Only the ``progress`` record (for the agent), nothing to the extras: for frequent
    updates between the points where metrics are worth logging. Rank 0 only."""
    if not is_rank_zero():
        return
    _jsonl.progress(step, total=total, loss=loss, epoch=epoch, metrics=metrics)


def checkpoint(step: int, path: str, metrics: dict[str, Any] | None = None) -> None:
    """A ``checkpoint`` record (step, path, metrics) once a checkpoint is durable."""
    _jsonl.checkpoint(step, path, metrics)


def finish() -> None:
    """Finish the extras; the next ``log`` configures them again (from ``$CORRAL_TRACKERS``)."""
    global _extras
    with _lock:
        if _extras is not None:
            _extras.finish()
        _extras = None
