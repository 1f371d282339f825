"""Decide what happens when an attempt ends without success: recover (new attempt, same run id,
resume from checkpoints, skip completed stages) or give up.

Rules (spec ``recovery``):
- a preemption (the provider reports the machine preempted, or the job exited with the SDK's
  "preempted" code 75) is recovered while fewer than ``max_preemption_restarts`` preemptions
  have been recovered for this run;
- an error (a stage exited non-zero, the machine failed) is recovered while fewer than
  ``max_error_restarts`` errors have been recovered, and, when ``recover_on_exit_codes`` is
  non-empty, only for those exit codes (a machine failure, which has no exit code, is always
  eligible);
- a job its machine killed for going over a limit (a pool worker's ``--job-memory``) is never
  recovered: a new attempt would meet the same limit;
- nor is an attempt whose node could not run the job at all (exit 78 before any stage: its
  image could not be pulled, no container engine for it, no runtime for corral): the same
  image on the same offer would fail the same way, again and again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.spec import JobSpec
from corral.store.records import AttemptRecord
from corral.wire.outcome import OutcomeKind

PREEMPTED = OutcomeKind.PREEMPTED.value
FAILED = OutcomeKind.FAILED.value


@dataclass(frozen=True)
class Decision:
    recover: bool
    reason: str


def decide(
    spec: JobSpec,
    attempts: Sequence[AttemptRecord],
    current: int,
    kind: OutcomeKind,
    exit_code: int | None,
    over_limit: bool = False,
    cannot_boot: bool = False,
) -> Decision:
    """Whether attempt ``current``, which ended as ``kind`` (a preemption or a failure), is
    recovered; ``attempts`` are the run's attempts (the current one's own exit is ``kind``
    whatever the store says of it yet)."""
    rec = spec.recovery
    if over_limit:
        return Decision(False, "over its machine's limit: a new attempt would be too")
    if cannot_boot:
        return Decision(False, "the node cannot run this job: a new attempt would fail the same")
    ended = [a for a in attempts if a.number != current and a.exit_reason in (PREEMPTED, FAILED)]
    if kind == OutcomeKind.PREEMPTED:
        used = sum(1 for a in ended if a.exit_reason == PREEMPTED)
        limit = rec.max_preemption_restarts
        if used < limit:
            return Decision(True, f"preempted: restart {used + 1} of {limit}")
        return Decision(False, f"preempted {used + 1} times; max_preemption_restarts is {limit}")
    used = sum(1 for a in ended if a.exit_reason == FAILED)
    limit = rec.max_error_restarts
    codes = list(rec.recover_on_exit_codes or [])
    if codes and exit_code is not None and exit_code not in codes:  # None: the machine failed
        return Decision(False, f"exit code {exit_code} is not in recovery.recover_on_exit_codes")
    if used < limit:
        return Decision(True, f"error: restart {used + 1} of {limit}")
    return Decision(
        False, "no error restarts left" if limit else "recovery.max_error_restarts is 0"
    )
