"""Mistakes with ``checkpoints.path`` that would lose a whole run, said while the run is live.

* **nothing at the path while the job makes progress**: the stages have run for a few settle
  periods (``NOTHING_AFTER_SETTLES`` x ``checkpoints.settle``), a progress step was read or
  the stages' logs grew, and the path still matches nothing: a preemption now would start
  from scratch. Said once per attempt.
* **resumed far below the restored step**: the snapshot restored before the stages was taken
  when a stage's progress read step S; the first step above 0 the same stage reports in this
  attempt is below ``S * FAR_BELOW`` (the script started again instead of resuming:
  ``resume_args`` left out, or a script that ignores ``CORRAL_RESUME_FROM``). Said once per
  stage. A step of 0 says nothing either way: the HF Trainer resumed at step 150 draws its bar
  at ``0/N`` first, then at ``151/N``.

Each is a ``checkpoint.warning`` event (shown by ``corral status`` as a ``warning`` line) and
the mirror's status ``warning``. The progress is the runner's status (the stages' progress
records, the same ones ``corral status`` shows); the logs are the stages' log files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from corral.wire.node import NodeRunner

NOTHING_AFTER_SETTLES = 3.0
#: never sooner than this after the stages started (a ``settle`` of 0 s in tests)
NOTHING_AFTER_MIN_S = 3.0
#: the first step after a restore below this share of the restored step is "far below"
FAR_BELOW = 0.5


def stage_steps(runner: NodeRunner) -> dict[str, int]:
    """Each stage's latest progress step, as the runner's status shows it."""
    out: dict[str, int] = {}
    try:
        stages = runner.status().get("stages") or []
    except Exception:  # the runner's status is a hint here, never a failure
        return out
    for stage in stages:
        progress = stage.get("progress") if isinstance(stage, dict) else None
        step = progress.get("step") if isinstance(progress, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            out[str(stage.get("name"))] = step
    return out


class MirrorAdvice:
    """Watches an attempt for the two mistakes above; :meth:`look` is called by the mirror's
    loop after each of its looks."""

    def __init__(
        self,
        patterns: list[str],
        settle_s: float,
        warn: Callable[[str, dict[str, Any]], None],
        clock: Callable[[], float],
    ):
        self.patterns = patterns
        self.nothing_after_s = max(NOTHING_AFTER_SETTLES * settle_s, NOTHING_AFTER_MIN_S)
        self._warn = warn
        self._clock = clock
        self._started: float | None = None
        self._logs_at_start = 0
        self._nothing_checked = False  # said, or the path matched something
        self._nothing_said = False
        self._restored: dict[str, int] = {}
        self._restored_name = ""
        self._checked: set[str] = set()

    def start(self, runner: NodeRunner, restored: str | None, steps: Mapping[str, int]) -> None:
        """The stages start now; ``restored`` (with the stages' ``steps`` when it was taken)
        is the snapshot they resume from, if any."""
        self._started = self._clock()
        self._logs_at_start = _logs_size(runner)
        if restored is not None:
            self._restored = {k: v for k, v in steps.items() if v >= 2}
            self._restored_name = restored

    @property
    def said_nothing(self) -> bool:
        """The path matching nothing was said while the job ran."""
        return self._nothing_said

    @property
    def busy(self) -> bool:
        """Whether a look still has something to check."""
        return not self._nothing_checked or len(self._checked) < len(self._restored)

    def look(self, runner: NodeRunner, recognised: bool) -> None:
        if self._started is None or not self.busy:
            return
        steps: dict[str, int] | None = None
        if self._restored and len(self._checked) < len(self._restored):
            steps = stage_steps(runner)
            for stage, saved in self._restored.items():
                first = steps.get(stage)
                if stage in self._checked or first is None or first <= 0:
                    continue
                self._checked.add(stage)
                if first < saved * FAR_BELOW:
                    self._warn(
                        f"stage {stage} started at step {first} after {self._restored_name} "
                        f"was restored, saved at step {saved}: the job does not resume from "
                        "it (give the stage resume_args, or have the script read "
                        "CORRAL_RESUME_FROM)",
                        {"stage": stage, "step": first, "restored_step": saved},
                    )
        if recognised:
            self._nothing_checked = True
        if self._nothing_checked:
            return
        waited = self._clock() - self._started
        if waited < self.nothing_after_s:
            return
        steps = stage_steps(runner) if steps is None else steps
        grew = _logs_size(runner) > self._logs_at_start
        if not steps and not grew:
            return
        self._nothing_checked = self._nothing_said = True
        shown = ", ".join(f"{k} at step {v}" for k, v in steps.items()) or "its log growing"
        self._warn(
            f"checkpoints.path {', '.join(self.patterns)} has matched nothing in the workdir "
            f"{waited:.0f} s into the job ({shown}): if the job has saved a checkpoint, the "
            "path does not name it, and a new machine would start from scratch",
            {"paths": self.patterns, "after_s": round(waited, 1)},
        )


def _logs_size(runner: NodeRunner) -> int:
    """The stages' logs' total size (the runner's ``logs_dir``; 0 where it has none)."""
    logs = getattr(runner, "logs_dir", None)
    if logs is None:
        return 0
    total = 0
    try:
        with os.scandir(logs) as entries:
            for entry in entries:
                if entry.name.endswith(".log") and not entry.name.startswith("_"):
                    try:
                        total += entry.stat().st_size
                    except OSError:
                        continue
    except OSError:
        return 0
    return total
