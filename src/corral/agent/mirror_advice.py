"""Mistakes with ``checkpoints.path`` that would lose a whole run, said while the run is live.

* **nothing at the path while the job makes progress**: a progress step was read or the stages'
  logs grew, the path still matches nothing, and either

  - the job has written something that looks like a checkpoint elsewhere in the workdir (a
    file or directory made since the stages started, named like ``checkpoint-500``,
    ``ckpt_3``, ``last.pt`` or ``model.safetensors``: :func:`looks_like_checkpoint`): said
    after ``NOTHING_AFTER_SETTLES`` x ``checkpoints.settle``, naming what it wrote; or
  - nothing in the workdir looks like a checkpoint either: said only after
    ``NO_EVIDENCE_AFTER_S`` (10 min), since a job whose first save is late (the HF Trainer
    saves every 500 steps by default) has lost nothing yet, and a warning before its first
    save would be a false alarm.

  A preemption then would start from scratch. Said once per attempt.
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
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from corral.wire.node import NodeRunner

NOTHING_AFTER_SETTLES = 3.0
#: never sooner than this after the stages started (a ``settle`` of 0 s in tests)
NOTHING_AFTER_MIN_S = 3.0
#: with nothing in the workdir that looks like a checkpoint, the path matching nothing is said
#: only this long into the job (and never before ``NOTHING_AFTER_SETTLES`` settles)
NO_EVIDENCE_AFTER_S = 600.0
#: the workdir is looked through for checkpoint-like names at most this often
SCAN_EVERY_MIN_S = 2.0
#: entries looked at per scan (a huge workdir is looked at in part, never walked whole)
SCAN_MAX_ENTRIES = 20_000
#: directories never looked into: version control, environments, caches, tool logs
SKIP_DIRS = frozenset(
    {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".cache", "wandb", "mlruns"}
)
_CKPT_NAME = re.compile(
    r"(^|[_.-])(checkpoint|ckpt)s?([_.-]|\d|$)|^(last|best)\.|"
    r"\.(pt|pth|ckpt|safetensors|bin|pkl|h5|keras|npz|distcp)$",
    re.IGNORECASE,
)


def looks_like_checkpoint(name: str) -> bool:
    """Whether a file or directory name looks like a checkpoint's (``checkpoint-500``,
    ``ckpt.pt``, ``last.pt``, ``model.safetensors``, ``epoch=3-step=100.ckpt``)."""
    return bool(_CKPT_NAME.search(name))


def new_checkpoint_like(workdir: str, since: float) -> str | None:
    """A workdir-relative path, made or changed at or after ``since`` (wall time), whose name
    looks like a checkpoint's (a directory: one holding a file); None when none (hidden directories and :data:`SKIP_DIRS` are
    not looked into; at most :data:`SCAN_MAX_ENTRIES` entries)."""
    seen = 0
    stack = [workdir]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > SCAN_MAX_ENTRIES:
                return None
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if (
                    looks_like_checkpoint(entry.name)
                    and entry.stat(follow_symlinks=False).st_mtime >= since
                    and (not is_dir or _holds_a_file(entry.path))
                ):
                    return os.path.relpath(entry.path, workdir)
            except OSError:
                continue
            if is_dir and not entry.name.startswith(".") and entry.name not in SKIP_DIRS:
                stack.append(entry.path)
    return None


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
        workdir: str | None = None,
    ):
        self.patterns = patterns
        self.workdir = workdir
        self.nothing_after_s = max(NOTHING_AFTER_SETTLES * settle_s, NOTHING_AFTER_MIN_S)
        self.no_evidence_after_s = max(self.nothing_after_s, NO_EVIDENCE_AFTER_S)
        self._scan_every = max(SCAN_EVERY_MIN_S, settle_s)
        self._scanned_at: float | None = None
        self._started_wall = 0.0
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
        self._started_wall = time.time() - 1.0  # mtimes are coarse on some filesystems
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
        elsewhere = self._evidence(waited)
        if elsewhere is None and waited < self.no_evidence_after_s:
            return
        self._nothing_checked = self._nothing_said = True
        shown = ", ".join(f"{k} at step {v}" for k, v in steps.items()) or "its log growing"
        paths = ", ".join(self.patterns)
        if elsewhere is not None:
            text = (
                f"checkpoints.path {paths} has matched nothing in the workdir {waited:.0f} s "
                f"into the job ({shown}), but the job wrote {elsewhere}: the path does not "
                "name its checkpoints, and a new machine would start from scratch"
            )
        else:
            text = (
                f"checkpoints.path {paths} has matched nothing in the workdir "
                f"{waited / 60:.0f} min into the job ({shown}), and nothing there looks like a "
                "checkpoint: if the job saves one, the path does not name it, and a new "
                "machine would start from scratch"
            )
        data: dict[str, Any] = {"paths": self.patterns, "after_s": round(waited, 1)}
        if elsewhere is not None:
            data["found"] = elsewhere
        self._warn(text, data)

    def _evidence(self, waited: float) -> str | None:
        """What the job wrote that looks like a checkpoint (a scan at most every
        ``_scan_every`` seconds); None without a workdir or a find."""
        if self.workdir is None:
            return None
        if self._scanned_at is not None and waited - self._scanned_at < self._scan_every:
            return None
        self._scanned_at = waited
        return new_checkpoint_like(self.workdir, self._started_wall)


def _holds_a_file(path: str) -> bool:
    """Whether the directory holds a file (an empty ``checkpoints/`` made at start-up is no
    checkpoint)."""
    try:
        with os.scandir(path) as entries:
            return any(e.is_file(follow_symlinks=False) for e in entries)
    except OSError:
        return False


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
