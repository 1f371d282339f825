"""Hugging Face ``Trainer`` integration: progress, cost, retention and preemption.

::

    from corral.sdk.integrations.hf import CorralCallback, last_complete_checkpoint

    callback = CorralCallback()   # retention: the spec's `checkpoints:` (or keep_last=..., ...)
    args = TrainingArguments(output_dir=ckpt_dir, save_steps=50, save_total_limit=None, ...)
    trainer = Trainer(model=model, args=args, ..., callbacks=[callback])
    trainer.train(resume_from_checkpoint=last_complete_checkpoint(ckpt_dir))
    callback.exit_if_preempted()   # exit 75 ("resume me") if a SIGTERM stopped training

What the callback does (on the main process only):

* **Progress and cost**: a ``progress`` record (step, total, epoch, ``cost_usd``) at most every
  ``progress_every_s`` seconds; each Trainer log with a ``loss`` goes through
  :func:`corral.sdk.trackers.report`, other logs (evaluation) through ``log``, both with
  ``cost_usd``. The :class:`~corral.sdk.cost.CostMeter` budget is checked every step.
* **Retention**: ``keep_last``, ``keep_best``, ``metric`` and ``mode`` left out come from the
  job spec's ``checkpoints`` section (``CORRAL_CHECKPOINT_KEEP_LAST/_KEEP_BEST/_METRIC/_MODE``,
  set by the agent), else 3, 0, none, ``min``, as for the ``Checkpointer``
  (:func:`corral.sdk.retention.retention_policy`). After each save, the ``checkpoint-<step>``
  dirs of ``output_dir`` are pruned with :func:`corral.sdk.retention.select_to_keep` (newest
  ``keep_last`` plus best ``keep_best`` by ``metric`` from each checkpoint's
  ``trainer_state.json``, counting only an evaluation logged at exactly the checkpoint's step;
  the checkpoint just saved and the Trainer's best checkpoint are kept too). A checkpoint
  counts as complete once its ``trainer_state.json`` (the last file the Trainer writes)
  parses; incomplete ones, left by a kill during a save, are deleted and never resumed from.
  Leave ``save_total_limit`` unset.
* **Preemption** (SIGTERM/SIGUSR1, handlers installed at train begin): at the next step end the
  Trainer is told to save, if the grace period left fits the last measured save, and to stop;
  an evaluation due at that step is skipped (it would run before the save, in the grace time).
  In a ``torch.distributed`` job every step end (every ``check_every``-th global step) is one
  tiny all_reduce so that all ranks stop (and save, through the Trainer's own main-process
  logic) at the same step when any rank was signalled or asked to stop, with the smallest grace
  time left and the longest last save of any rank (with nccl the all_reduce also synchronises
  the GPU: a larger ``check_every`` makes that rarer);
  ``exit_if_preempted()`` after ``trainer.train()`` returns exits with
  :data:`corral.wire.env.EXIT_PREEMPTED`. A stop asked by the budget or by
  :class:`~corral.sdk.early_stop.EarlyStopping` saves and stops too, but does not exit.
* Each save writes the cost so far into the checkpoint's ``trainer_state.json`` (under
  ``stateful_callbacks["corral"]``) and ``corral_state.json``, and a ``checkpoint`` record to the
  progress file; the cost continues from it on resume, also from a checkpoint outside
  ``output_dir``. A second ``trainer.train()`` after a budget or early stop is not stopped by
  the last run's request (the budget is checked again at its first step). It also writes the
  resolved config as ``corral_config.json`` into the checkpoint: ``config=`` (a
  ``TrainingConfig``, dataclass, pydantic model or dict), else the config last returned by
  :func:`corral.sdk.load_config` (none loaded: no file).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from corral.errors import BadInput
from corral.files import write_json_atomic
from corral.sdk import distributed, signals, trackers
from corral.sdk.cost import CostMeter
from corral.sdk.resume import loaded_config, plain_config
from corral.sdk.retention import retention_policy, select_to_keep

__all__ = [
    "CONFIG_FILE",
    "STATE_FILE",
    "CorralCallback",
    "complete_checkpoints",
    "last_complete_checkpoint",
]

log = logging.getLogger("corral.sdk.integrations.hf")

STATE_FILE = "corral_state.json"
CONFIG_FILE = "corral_config.json"
#: The key of the cost in ``TrainerState.stateful_callbacks`` (``trainer_state.json``).
STATEFUL_KEY = "corral"
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def _trainer_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _checkpoint_dirs(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CKPT_RE.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def complete_checkpoints(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, path)`` of the complete ``checkpoint-<step>`` dirs, oldest first."""
    return [(s, p) for s, p in _checkpoint_dirs(output_dir) if _trainer_state(p) is not None]


def last_complete_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest complete checkpoint dir (for ``trainer.train(resume_from_checkpoint=...)``),
    or None to start fresh. Incomplete dirs are skipped with a warning."""
    complete = {s for s, _ in complete_checkpoints(output_dir)}
    for step, path in reversed(_checkpoint_dirs(output_dir)):
        if step in complete:
            return str(path)
        log.warning("skipping incomplete checkpoint %s (no valid trainer_state.json)", path)
    return None


def _metric_at(state: dict[str, Any], step: int, metric: str | None) -> dict[str, Any]:
    """``{metric: value}`` from the latest log entry of exactly ``step`` that has it, else ``{}``.

    Only an evaluation at the checkpoint's own step describes its weights: an earlier value
    would rank a checkpoint by a model it no longer holds."""
    if not metric:
        return {}
    for entry in reversed(state.get("log_history") or []):
        if isinstance(entry, dict) and metric in entry and entry.get("step") == step:
            return {metric: entry[metric]}
    return {}


def _write_json(target: Path, data: Any) -> None:
    write_json_atomic(
        target, data, indent=1, sort_keys=True, default=str, newline=True, mode=0o644, fsync=False
    )


def _numbers(logs: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[key] = float(value)
    return out


class CorralCallback(TrainerCallback):
    def __init__(
        self,
        *,
        keep_last: int | None = None,
        keep_best: int | None = None,
        metric: str | None = None,
        mode: str | None = None,
        cost_meter: CostMeter | None = None,
        config: Any = None,
        progress_every_s: float = 10.0,
        install_signals: bool = True,
        check_every: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ):
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise BadInput(f"check_every must be an integer >= 1, got {check_every!r}")
        policy = retention_policy(keep_last, keep_best, metric, mode)
        self.keep_last: int = policy["keep_last"]
        self.keep_best: int = policy["keep_best"]
        self.metric: str | None = policy["metric"]
        self.mode: str = policy["mode"]
        # Created now, not at train begin: a bad CORRAL_HOURLY_PRICE/budget fails here with a
        # clear error, and model loading (paid GPU time too) is counted.
        self.cost_meter = cost_meter if cost_meter is not None else CostMeter()
        self.config = config
        self.progress_every_s = progress_every_s
        self.install_signals = install_signals
        self.check_every = check_every  # distributed: agree on stops at these global steps
        self._clock = clock
        self._last_progress_at: float | None = None
        self._work_done_at: float | None = None  # end of the step/evaluation before a save
        self.save_seconds: float | None = None  # duration of the last save
        self.stopped_for: str | None = None  # "preempted", "budget", ... once it stopped training
        self.preempted_without_save = False
        if install_signals:  # now already: a notice while the model loads must not kill -15
            signals.install_signal_handlers()

    # --- helpers -------------------------------------------------------------------------

    def _meter(self) -> CostMeter:
        if self.cost_meter is None:
            self.cost_meter = CostMeter()
        return self.cost_meter

    def _cost(self) -> dict[str, float]:
        return self._meter().as_metrics()

    # --- Trainer events ------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if self.install_signals:
            signals.install_signal_handlers()
        meter = self._meter()
        if self.stopped_for is not None and self.stopped_for != "preempted":
            # A new train() after a budget or early stop: that request was for the last run
            # (the meter asks again at the first step if the budget is still used up).
            signals.clear_stop_request(self.stopped_for)
            meter.clear_stop()
            self.stopped_for = None
        if state.global_step > 0:  # resumed: continue the cost from that checkpoint
            self._load_cost(args, state, meter)
        return control

    def _load_cost(self, args, state, meter: CostMeter) -> None:
        """The cost saved with the checkpoint resumed from: in its ``trainer_state.json``
        (wherever the checkpoint is, also outside ``output_dir``), else (a checkpoint from an
        older corral) its ``corral_state.json`` in ``output_dir``."""
        saved_state = (getattr(state, "stateful_callbacks", None) or {}).get(STATEFUL_KEY)
        if isinstance(saved_state, dict):
            try:
                meter.load_state_dict(saved_state)
                return
            except BadInput as e:
                log.warning("unusable corral state in the checkpoint (%s)", e)
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        try:
            meter.load_state_dict(json.loads(saved.read_text()))
        except (OSError, ValueError, BadInput) as e:  # missing, torn or not our shape
            log.warning("no corral state in %s (%s); cost starts from the offset", saved, e)

    def _stash_cost(self, state) -> None:
        """Put the cost so far into the TrainerState, which the Trainer writes into the next
        checkpoint's ``trainer_state.json`` (read back by :meth:`_load_cost`)."""
        stash = getattr(state, "stateful_callbacks", None)
        if isinstance(stash, dict):
            stash[STATEFUL_KEY] = self._meter().state_dict()

    def on_epoch_end(self, args, state, control, **kwargs):
        self._stash_cost(state)  # a save_strategy="epoch" save comes next
        return control

    def on_step_end(self, args, state, control, **kwargs):
        now = self._clock()
        self._work_done_at = now
        if state.is_world_process_zero:
            last = self._last_progress_at
            due = last is None or now - last >= self.progress_every_s
            if due or state.global_step >= (state.max_steps or math.inf):
                self._last_progress_at = now
                trackers.progress(
                    state.global_step,
                    total=state.max_steps or None,
                    epoch=state.epoch,
                    **self._cost(),
                )
        self._meter().check(state.global_step)
        self._stash_cost(state)  # before a save the Trainer makes after this step
        if distributed.is_distributed():
            if state.global_step % self.check_every:
                return control  # every rank skips the same steps: they are in lockstep
            preempted, left, estimate = self._agree_on_preemption()
        else:
            preempted, left = signals.preempted(), signals.seconds_left()
            estimate = self.save_seconds
        if not preempted and not signals.should_stop():  # (agreed above when distributed)
            return control
        reason = "preempted" if preempted else signals.stop_reason() or "requested"
        self.stopped_for = reason
        control.should_training_stop = True
        if reason == "preempted":
            # The Trainer evaluates before it saves: an evaluation due at this step would spend
            # the grace period (the agent's SIGKILL then lands before the save). Skip it.
            control.should_evaluate = False
            if left is None or signals.save_fits(left, estimate):
                control.should_save = True
            else:
                control.should_save = False
                self.preempted_without_save = True
                took = "unknown" if estimate is None else f"{estimate:.1f}s"
                print(
                    f"corral: preempted with {max(left, 0.0):.1f}s of grace left, not enough "
                    f"for a save (the last took {took}): stopping without one",
                    file=sys.stderr,
                )
        else:
            control.should_save = True
        return control

    def _agree_on_preemption(self) -> tuple[bool, float | None, float | None]:
        """All ranks decide at the same step end, from the same numbers: whether any rank
        asks to stop (budget, early stopping: then every rank stops, with the reason "stopped
        by another rank" where it had none), the smallest grace time left of any signalled
        rank and the longest last save of any rank. A failing
        collective is reported and this rank exits 75 if it was signalled itself; otherwise the
        error is raised (a peer died or the network broke: a crash, not a preemption)."""
        try:
            left, stop = distributed.agree_left_and_stop(
                signals.seconds_left(), signals.should_stop()
            )
            if stop and not signals.should_stop():
                signals.request_stop("stopped by another rank")
            if left is None:
                return False, None, None
            left, estimate = distributed.agree_left_and_estimate(left, self.save_seconds)
        except RuntimeError as exc:
            if not signals.preempted():
                raise
            print(
                f"corral: the ranks could not agree on preemption ({type(exc).__name__}: "
                f"{exc}); exiting with the preemption code on this rank",
                file=sys.stderr,
            )
            trackers.finish()
            signals.exit_preempted()
        return True, left, estimate

    def on_evaluate(self, args, state, control, **kwargs):
        self._work_done_at = self._clock()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return control
        values = {**_numbers(logs), **self._cost()}
        if "loss" in values:
            loss = values.pop("loss")
            values.pop("epoch", None)
            trackers.report(
                state.global_step,
                total=state.max_steps or None,
                loss=loss,
                epoch=state.epoch,
                **values,
            )
        else:
            trackers.log(values, state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._work_done_at is not None:
            self.save_seconds = max(self._clock() - self._work_done_at, 0.0)
        if not state.is_world_process_zero:
            return control
        step = state.global_step
        path = Path(args.output_dir) / f"checkpoint-{step}"
        if path.is_dir():
            self._write_state(path)
            saved_state = _trainer_state(path) or {}
            trackers.checkpoint(
                step,
                str(path.resolve()),
                {**_metric_at(saved_state, step, self.metric), **self._cost()},
            )
        self.apply_retention(args.output_dir, best=state.best_model_checkpoint, just_saved=step)
        return control

    # --- public --------------------------------------------------------------------------

    def _write_state(self, path: Path) -> None:
        _write_json(path / STATE_FILE, self._meter().state_dict())
        config = loaded_config() if self.config is None else plain_config(self.config)
        if config is not None:
            _write_json(path / CONFIG_FILE, config)

    def apply_retention(
        self,
        output_dir: str | os.PathLike[str],
        best: str | None = None,
        just_saved: int | None = None,
    ) -> list[Path]:
        """Delete the checkpoints the policy does not keep, and incomplete ones; returns the
        deleted paths. ``best`` (the Trainer's best checkpoint) and the step ``just_saved`` are
        always kept."""
        all_dirs = _checkpoint_dirs(output_dir)
        complete: list[tuple[int, dict[str, Any]]] = []
        for step, path in all_dirs:
            saved = _trainer_state(path)
            if saved is not None:
                complete.append((step, _metric_at(saved, step, self.metric)))
        keep = select_to_keep(
            complete,
            self.keep_last,
            self.keep_best,
            self.metric,
            self.mode,
            protected=() if just_saved is None else (just_saved,),
        )
        if best:
            match = _CKPT_RE.match(Path(best).name)
            if match:
                keep.add(int(match.group(1)))
        complete_steps = {s for s, _ in complete}
        deleted = []
        for step, path in all_dirs:
            if step in keep:
                continue
            why = "retention" if step in complete_steps else "incomplete"
            log.info("deleting checkpoint %s (%s)", path, why)
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(path)
        return deleted

    def exit_if_preempted(self) -> None:
        """Call after ``trainer.train()`` returns, on every rank: exits with
        ``EXIT_PREEMPTED`` (75) when training stopped because of a preemption signal, or a
        signal came since, the ranks of a distributed job deciding together
        (:func:`corral.sdk.signals.exit_after_training`); else returns."""
        signals.exit_after_training(self.stopped_for == "preempted", trackers.finish)
