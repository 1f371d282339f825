"""PyTorch Lightning integration: checkpoints, progress, cost and preemption.

::

    from corral.sdk.integrations.lightning import CorralCallback

    callback = CorralCallback(every_n_steps=500)   # checkpoints in $CORRAL_CHECKPOINT_DIR
    trainer = lightning.Trainer(max_steps=10_000, callbacks=[callback], ...)
    trainer.fit(model, datamodule, ckpt_path=callback.resume_path())
    callback.exit_if_preempted()   # exit 75 ("resume me") if a SIGTERM stopped training

The same guarantees as the Hugging Face callback (:mod:`corral.sdk.integrations.hf`):

* **Checkpoints** are corral checkpoints (a :class:`~corral.sdk.Checkpointer`: atomic,
  sha256-verified, retained by the job spec's ``checkpoints:`` policy, mirrored by the agent),
  holding Lightning's whole training state (``Trainer`` checkpoint dict: weights, optimizers,
  schedulers, loops, callbacks, precision plugin). They are saved every ``every_n_steps``
  optimizer steps, on a stop (budget, early stop, preemption) and at the end of training
  (``save_on_train_end``); ``keep_best`` uses ``trainer.callback_metrics[metric]`` at the save.
* **Resume**: ``trainer.fit(..., ckpt_path=callback.resume_path())`` (the newest *valid*
  checkpoint, None for a fresh start). The callback lets Lightning's checkpoint loading read a
  corral checkpoint directory (any other ``ckpt_path`` is loaded as before). The cost so far
  travels in the checkpoint (the callback's ``state_dict``) and continues.
* **Progress and cost**: a ``progress`` record (step, total, epoch, loss, ``cost_usd``) at most
  every ``progress_every_s`` seconds on the global-zero rank, validation metrics as a
  ``metrics`` record; the :class:`~corral.sdk.cost.CostMeter` budget is checked every step.
* **Preemption** (SIGTERM/SIGUSR1): at the next batch end the callback saves, if the grace
  period left fits the last save, and stops the Trainer; ``exit_if_preempted()`` after ``fit``
  returns exits with :data:`corral.wire.env.EXIT_PREEMPTED`. Lightning's own SIGTERM handler
  (which would end ``fit`` with ``SystemExit`` and exit code 0, "done") is replaced by corral's
  while training runs; should Lightning end ``fit`` that way anyway, the exit code is made 75.
  In a ``torch.distributed`` job the ranks agree at every ``check_every``-th step (one small
  all_reduce), as with the HF callback, and every rank exits 75 together.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from corral.errors import BadInput
from corral.sdk import distributed, signals, trackers
from corral.sdk.checkpoint import Checkpointer
from corral.sdk.cost import CostMeter
from corral.sdk.manifest import MANIFEST_NAME
from corral.sdk.resume import loaded_config, plain_config
from corral.sdk.sharded import has_dtensors
from corral.wire.env import EXIT_PREEMPTED

__all__ = ["CorralCallback", "CorralCheckpointIO"]


def _is_corral_checkpoint(path: Any) -> bool:
    try:
        return (Path(path) / MANIFEST_NAME).is_file()
    except (TypeError, ValueError, OSError):
        return False


class CorralCheckpointIO(CheckpointIO):
    """Lightning's checkpoint IO, reading corral checkpoint directories too: a ``ckpt_path``
    holding a ``COMPLETE`` manifest is restored (sha256-verified) by the callback's
    Checkpointer; everything else goes to the IO it wraps."""

    def __init__(self, inner: CheckpointIO, checkpointer: Checkpointer):
        self.inner = inner
        self.checkpointer = checkpointer

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None):
        return self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None):
        if _is_corral_checkpoint(path):
            return self.checkpointer.restore(str(path))
        return self.inner.load_checkpoint(
            path, map_location=map_location, weights_only=weights_only
        )

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def _loss_of(outputs: Any) -> float | None:
    loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
    try:
        return float(loss.detach().item()) if hasattr(loss, "detach") else None
    except (RuntimeError, ValueError):
        return None


def _numbers(metrics: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(metrics or {}).items():
        try:
            if hasattr(value, "numel") and value.numel() != 1:
                continue
            number = value.item() if hasattr(value, "item") else value
        except (RuntimeError, ValueError):
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            continue
        out[str(key)] = float(number)
    return out


class CorralCallback(pl.Callback):
    def __init__(
        self,
        dir: str | None = None,
        *,
        every_n_steps: int | None = None,
        keep_last: int | None = None,
        keep_best: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
        cost_meter: CostMeter | None = None,
        config: Any = None,
        progress_every_s: float = 10.0,
        save_on_train_end: bool = True,
        install_signals: bool = True,
        check_every: int = 1,
        checkpointer: Checkpointer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        for name, value in (("every_n_steps", every_n_steps), ("check_every", check_every)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):  # fmt: skip
                raise BadInput(f"{name} must be an integer >= 1, got {value!r}")
        self.checkpointer = checkpointer or Checkpointer(
            dir, keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode
        )
        self.every_n_steps = every_n_steps
        # Created now: a bad CORRAL_HOURLY_PRICE fails here, and model loading is counted.
        self.cost_meter = cost_meter if cost_meter is not None else CostMeter()
        self.config = config
        self.progress_every_s = progress_every_s
        self.save_on_train_end = save_on_train_end
        self.install_signals = install_signals
        self.check_every = check_every
        self._clock = clock
        self._last_progress_at: float | None = None
        self._last_step: int | None = None
        self._saved_step: int | None = None  # the step of the last save started here
        self.stopped_for: str | None = None  # "preempted", "budget", ... once it stopped fit
        self.preempted_without_save = False
        if install_signals:  # now already: a notice while the model loads must not kill -15
            signals.install_signal_handlers()

    # --- checkpoint state (Lightning saves it in every checkpoint, and restores it) ---------

    def state_dict(self) -> dict[str, Any]:
        config = loaded_config() if self.config is None else plain_config(self.config)
        return {**self.cost_meter.state_dict(), "config": config}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        cost = {k: v for k, v in state_dict.items() if k != "config"}
        try:
            self.cost_meter.load_state_dict(cost)
        except BadInput as exc:
            print(f"corral: unusable cost in the checkpoint ({exc})", file=sys.stderr)

    # --- public ----------------------------------------------------------------------------

    def resume_path(self) -> str | None:
        """The newest valid checkpoint (for ``trainer.fit(..., ckpt_path=...)``), or None."""
        info = self.checkpointer.latest()
        return None if info is None else info.path

    def exit_if_preempted(self) -> None:
        """Call after ``trainer.fit()`` returns, on every rank: exits with ``EXIT_PREEMPTED``
        (75) when a preemption signal stopped training (or came since), the ranks of a
        distributed job deciding together (:func:`corral.sdk.signals.exit_after_training`)."""

        def before_exit() -> None:
            self._flush()
            trackers.finish()

        signals.exit_after_training(self.stopped_for == "preempted", before_exit)

    # --- Lightning hooks -------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        if not isinstance(strategy.checkpoint_io, CorralCheckpointIO):
            strategy.checkpoint_io = CorralCheckpointIO(strategy.checkpoint_io, self.checkpointer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.install_signals:
            _take_back_signal_handlers()
        if self.stopped_for is not None and self.stopped_for != "preempted":
            signals.clear_stop_request(self.stopped_for)  # the last fit's budget/early stop
            self.cost_meter.clear_stop()
            self.stopped_for = None
        self._last_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        step = int(trainer.global_step)
        if step == self._last_step:
            return  # gradient accumulation: no optimizer step at this batch
        self._last_step = step
        self._report(trainer, step, outputs)
        self.cost_meter.check(step)
        if self.every_n_steps and step % self.every_n_steps == 0:
            self._save(trainer, step)
        if distributed.is_distributed():
            if step % self.check_every:
                return
            preempted, left, estimate = self._agree()
        else:
            preempted, left = signals.preempted(), signals.seconds_left()
            estimate = self.checkpointer.estimated_save_seconds
        if not preempted and not signals.should_stop():
            return
        reason = "preempted" if preempted else signals.stop_reason() or "requested"
        self.stopped_for = reason
        trainer.should_stop = True
        if reason != "preempted" or left is None or signals.save_fits(left, estimate):
            self._save(trainer, step)
            self._flush()
            distributed.barrier()  # no rank leaves before the checkpoint is durable
        else:
            self.preempted_without_save = True
            took = "unknown" if estimate is None else f"{estimate:.1f}s"
            print(
                f"corral: preempted with {max(left, 0.0):.1f}s of grace left, not enough for a "
                f"save (the last took {took}): stopping without one",
                file=sys.stderr,
            )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        values = {**_numbers(trainer.callback_metrics), **self.cost_meter.as_metrics()}
        trackers.log(values, int(trainer.global_step))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        step = int(trainer.global_step)
        if self.save_on_train_end and not self.preempted_without_save and self._saved_step != step:
            self._save(trainer, step)
        self._flush()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SystemExit) and signals.preempted():
            # Lightning's SIGTERM path ends fit with SystemExit(None), read as "done": resume me
            exception.code = EXIT_PREEMPTED
            self._flush()

    # --- helpers ---------------------------------------------------------------------------

    def _total(self, trainer: pl.Trainer) -> int | None:
        if trainer.max_steps and trainer.max_steps > 0:
            return int(trainer.max_steps)
        try:
            total = trainer.estimated_stepping_batches
        except Exception:  # no dataloader length: no total
            return None
        return int(total) if isinstance(total, (int, float)) and math.isfinite(total) else None

    def _report(self, trainer: pl.Trainer, step: int, outputs: Any) -> None:
        if not trainer.is_global_zero:
            return
        now = self._clock()
        last = self._last_progress_at
        total = self._total(trainer)
        if last is not None and now - last < self.progress_every_s and step != total:
            return
        self._last_progress_at = now
        trackers.report(
            step,
            total=total,
            loss=_loss_of(outputs),
            epoch=trainer.current_epoch,
            **self.cost_meter.as_metrics(),
        )

    def _save(self, trainer: pl.Trainer, step: int) -> None:
        self._saved_step = step
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        if not trainer.is_global_zero and not has_dtensors(checkpoint):
            return  # data parallel: one writer (a sharded state: every rank writes its part)
        metrics = {**_numbers(trainer.callback_metrics), **self.cost_meter.as_metrics()}
        self.checkpointer.save(checkpoint, step, metrics=metrics)

    def _flush(self) -> None:
        try:
            self.checkpointer.wait()
        except Exception as exc:
            print(f"corral: a checkpoint save failed: {exc}", file=sys.stderr)

    def _agree(self) -> tuple[bool, float | None, float | None]:
        """As the HF callback: all ranks decide at the same step from the same numbers."""
        try:
            left, stop = distributed.agree_left_and_stop(
                signals.seconds_left(), signals.should_stop()
            )
            if stop and not signals.should_stop():
                signals.request_stop("stopped by another rank")
            if left is None:
                return False, None, None
            left, estimate = distributed.agree_left_and_estimate(
                left, self.checkpointer.estimated_save_seconds
            )
        except RuntimeError as exc:
            if not signals.preempted():
                raise
            print(
                f"corral: the ranks could not agree on preemption ({type(exc).__name__}: "
                f"{exc}); exiting with the preemption code on this rank",
                file=sys.stderr,
            )
            self._flush()
            trackers.finish()
            signals.exit_preempted()
        return True, left, estimate


def _take_back_signal_handlers() -> None:
    """Lightning installs its SIGTERM handler when ``fit`` starts (it chains ours, then ends
    ``fit`` with exit code 0 at the next batch). Put corral's back alone, without the warning
    :func:`~corral.sdk.signals.install_signal_handlers` gives for a script's own handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in signals.PREEMPTION_SIGNALS:
        if signal.getsignal(sig) is not signals._on_signal:
            signal.signal(sig, signals._on_signal)
