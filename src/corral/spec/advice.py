"""Advice on a valid spec: what it allows but what would quietly lose work. Warnings, never
errors: ``corral validate`` prints them on stderr, ``corral preflight`` shows them as checks,
``corral launch`` before it follows the run.

* **checkpoints that are never resumed from**: ``checkpoints.path`` is set, yet no stage has
  ``resume_args`` and none mentions ``CORRAL_RESUME_FROM``/``CORRAL_RESUME`` (in its command,
  or in a script file the command names in the workdir). corral would restore the checkpoint
  after a preemption and the script would start again at step 0.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from corral.spec.job import JobSpec

RESUME_VARS = ("CORRAL_RESUME_FROM", "CORRAL_RESUME")
#: a script the command names is read for the variables up to this size
SCRIPT_BYTES = 1_000_000


def spec_warnings(spec: JobSpec) -> list[str]:
    """Each warning as one line, ``FIELD: message``."""
    found = resume_warning(spec)
    return [found] if found else []


def resume_warning(spec: JobSpec) -> str | None:
    if not spec.checkpoints.path:
        return None
    workdir = Path(str(spec.workdir))
    for stage in spec.stage_list():
        if stage.resume_args or _mentions(stage.run, workdir):
            return None
    field = "resume_args" if spec.stages is None else "stages[].resume_args"
    return (
        f"{field}: checkpoints.path is set, but no stage has resume_args and none mentions "
        "CORRAL_RESUME_FROM or CORRAL_RESUME: after a preemption the checkpoint is restored and "
        "the job starts again from step 0 (give the training stage the flag that resumes, e.g. "
        '`resume_args: --init_from=resume` or `--resume_from_checkpoint "$CORRAL_RESUME_FROM"`)'
    )


def _mentions(command: str, workdir: Path) -> bool:
    """The command, or a file it names in the workdir (``python train.py``), mentions one of
    the resume variables."""
    if any(var in command for var in RESUME_VARS):
        return True
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the command text alone
        words = command.split()
    for word in words:
        if word.startswith(("-", "/")) or "=" in word or ".." in word.split("/"):
            continue
        path = workdir / word
        try:
            if not path.is_file() or path.stat().st_size > SCRIPT_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            continue
        if any(var in text for var in RESUME_VARS):
            return True
    return False
