"""corral's in-job SDK: import it in a training script.

Works without the rest of corral (a plain ``python train.py`` uses it too) and without torch.
Names are loaded lazily so ``import corral.sdk`` stays cheap and torch is imported only by the
parts that need it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

if sys.version_info < (3, 11):  # noqa: UP036  (a job's own python, not corral's runtime)
    raise ImportError(
        f"corral.sdk needs python 3.11 or later; this job runs python {sys.version_info[0]}."
        f"{sys.version_info[1]}"
    )

_EXPORTS: dict[str, str] = {
    # checkpoints
    "Checkpointer": "corral.sdk.checkpoint",
    "CheckpointInfo": "corral.sdk.checkpoint",
    "CheckpointError": "corral.sdk.checkpoint",
    "CheckpointLoadError": "corral.sdk.checkpoint",
    "CheckpointWarning": "corral.sdk.checkpoint",
    "Storage": "corral.sdk.storage",
    "LocalStorage": "corral.sdk.storage",
    "open_storage": "corral.sdk.storage",
    "select_to_keep": "corral.sdk.retention",
    "retention_policy": "corral.sdk.retention",
    # exact resume
    "training_state": "corral.sdk.resume",
    "restore_training_state": "corral.sdk.resume",
    "capture_rng_state": "corral.sdk.resume",
    "restore_rng_state": "corral.sdk.resume",
    # preemption
    "preempted": "corral.sdk.signals",
    "should_stop": "corral.sdk.signals",
    "should_stop_all": "corral.sdk.signals",
    "request_stop": "corral.sdk.signals",
    "install_signal_handlers": "corral.sdk.signals",
    "exit_if_preempted": "corral.sdk.signals",
    "stop_reason": "corral.sdk.signals",
    "uninstall_signal_handlers": "corral.sdk.signals",
    "EXIT_PREEMPTED": "corral.wire.env",
    # cost
    "CostMeter": "corral.sdk.cost",
    "BudgetWarning": "corral.sdk.cost",
    # metrics and evaluation
    "cer": "corral.sdk.metrics",
    "wer": "corral.sdk.metrics",
    "cer_per_sample": "corral.sdk.metrics",
    "wer_per_sample": "corral.sdk.metrics",
    "EarlyStopping": "corral.sdk.early_stop",
    "HighLossLogger": "corral.sdk.high_loss",
    # config
    "TrainingConfig": "corral.sdk.config",
    "load_config": "corral.sdk.config",
    "apply_overrides": "corral.sdk.config",
    # pre-flight and retry
    "preflight": "corral.sdk.preflight_checks",
    "retry": "corral.sdk.retrying",
    # trackers and progress
    "log": "corral.sdk.trackers",
    "report": "corral.sdk.trackers",
    "Tracker": "corral.sdk.trackers",
    "JsonlTracker": "corral.sdk.trackers",
    "WandbTracker": "corral.sdk.trackers",
    "MlflowTracker": "corral.sdk.trackers",
    "CompositeTracker": "corral.sdk.trackers",
    "NullTracker": "corral.sdk.trackers",
    "make_trackers": "corral.sdk.trackers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
