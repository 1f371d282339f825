"""What the end of an attempt means: decided here, once, as a typed :class:`AttemptOutcome`
that the controller (recovery, final state), the webhooks and ``corral status`` all read.

The facts come from two sides and are weighed only here:

* the agent: the phase it reports (a stage's exit code 75 is the SDK's "preempted, resume me";
  a stop asked for with a :class:`StopCause`), see :func:`stage_state`;
* the provider: the machine's :class:`~corral.wire.machine.InstanceState`. The provider is the
  source of truth for a preemption: an attempt the agent reports ``stopped`` on a machine the
  provider calls PREEMPTED was preempted, and a machine that vanished under its agent was
  preempted or failed as the provider says.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

from corral.wire.env import EXIT_CANNOT_BOOT, EXIT_PREEMPTED
from corral.wire.machine import InstanceState
from corral.wire.status import AgentStatus, Phase, StageState

#: the pseudo-stage of the setup commands (its log is ``_setup``)
SETUP_STAGE = "_setup"


class OutcomeKind(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    STOPPED = "stopped"


class StopCause(enum.StrEnum):
    """Why a graceful stop was asked for. The controller sends it with ``POST /stop``; the
    node's own hooks use it too (a cloud's preemption notice)."""

    USER = "user"
    BUDGET = "budget"
    DEADLINE = "deadline"
    IDLE = "idle"
    #: the provider announced (or carried out) a preemption of the machine
    PREEMPTION = "preemption"
    #: the agent process itself was told to stop (SIGTERM, SIGINT) or shut down
    AGENT = "agent"

    @classmethod
    def parse(cls, value: object) -> StopCause | None:
        try:
            return cls(str(value)) if value else None
        except ValueError:
            return None


class AttemptOutcome(BaseModel):
    """How one attempt ended. ``reason`` is one human line; ``cause`` says who stopped it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: OutcomeKind
    reason: str
    cause: StopCause | None = None
    exit_code: int | None = None
    failed_stage: str | None = None
    #: the job went over a limit its machine enforces (a pool worker's memory limit) and was
    #: killed for it: a new attempt would meet the same limit, so it is not recovered
    over_limit: bool = False
    #: a multi-node attempt: the node whose loss ended it (its rank; None: the attempt's
    #: machine, or a one-node attempt)
    node: int | None = None
    #: the node could not run the job at all (its image not pulled, no engine for it, no
    #: runtime for corral): the same image would fail the same way, so it is not recovered
    cannot_boot: bool = False


def over_limit(reason: str, status: AgentStatus | None = None) -> AttemptOutcome:
    """The outcome of an attempt whose job its machine killed for going over a limit
    (``reason`` names it): failed, whatever the stage's exit code says."""
    return AttemptOutcome(
        kind=OutcomeKind.FAILED,
        reason=reason,
        exit_code=status.exit_code if status is not None else None,
        failed_stage=status.failed_stage if status is not None else None,
        over_limit=True,
    )


def stage_state(exit_code: int | None, *, stopped: bool) -> StageState:
    """The state a stage ends in, from its exit code and whether the agent stopped it."""
    if exit_code == 0 and not stopped:
        return StageState.SUCCEEDED
    if exit_code == EXIT_PREEMPTED:
        return StageState.PREEMPTED
    return StageState.STOPPED if stopped else StageState.FAILED


def stage_exit_code(exit_code: int | None, *, stopped: bool, launcher: bool) -> int | None:
    """The exit code a stage ends with. A multi-GPU launcher (torchrun, ``accelerate launch``,
    ``deepspeed``) that the agent stopped exits with a code of its own that says nothing of its
    ranks (torchrun exits 1 when signalled, whether its ranks saved and exited 75 or were killed
    at the grace): such a stage ends with :data:`EXIT_PREEMPTED`, "stopped, resumable", as a job
    that exits 75 on the stop does, so its state is the same (see :func:`stage_state`). A 0 is
    kept, and so is the code of a launcher that exited before the stop (a failure of its own)."""
    if launcher and stopped and exit_code != 0:
        return EXIT_PREEMPTED
    return exit_code


def attempt_phase(stage: StageState) -> Phase | None:
    """The phase a stage's end puts the whole attempt in (None: the attempt goes on)."""
    if stage == StageState.FAILED:
        return Phase.FAILED
    if stage == StageState.PREEMPTED:
        return Phase.PREEMPTED
    return None


def _failure_reason(status: AgentStatus) -> str:
    stage, code = status.failed_stage, status.exit_code
    if stage == SETUP_STAGE:
        return f"setup failed with exit code {code}"
    if stage and code is not None:
        return f"stage '{stage}' exited with code {code}"
    return status.reason or (f"stage '{stage}' failed" if stage else "the attempt failed")


def from_agent(status: AgentStatus, machine: InstanceState | None = None) -> AttemptOutcome:
    """The outcome of an attempt whose agent reports a terminal phase. ``machine``: the
    provider's view of the machine, when asked (decides whether a stop was a preemption)."""
    phase = status.phase
    if not phase.terminal:
        raise ValueError(f"the attempt has not ended: phase {phase.value}")
    cause = StopCause.parse(status.stop_cause)
    stage, code = status.failed_stage, status.exit_code
    if phase == Phase.SUCCEEDED:
        return AttemptOutcome(kind=OutcomeKind.SUCCEEDED, reason="all stages succeeded")
    if phase == Phase.STOPPED and (
        machine == InstanceState.PREEMPTED or cause == StopCause.PREEMPTION
    ):
        phase, cause = Phase.PREEMPTED, StopCause.PREEMPTION
    if phase == Phase.PREEMPTED:
        return AttemptOutcome(
            kind=OutcomeKind.PREEMPTED,
            reason=f"preempted (stage '{stage}')" if stage else "preempted",
            cause=cause,
            exit_code=code,
            failed_stage=stage,
        )
    if phase == Phase.STOPPED:
        return AttemptOutcome(
            kind=OutcomeKind.STOPPED,
            reason=status.reason or "the agent stopped",
            cause=cause,
            exit_code=code,
            failed_stage=stage,
        )
    return AttemptOutcome(
        kind=OutcomeKind.FAILED,
        reason=_failure_reason(status),
        exit_code=code,
        failed_stage=stage,
        cannot_boot=stage is None and code == EXIT_CANNOT_BOOT,
    )


def from_machine(state: InstanceState, detail: str = "", node: int | None = None) -> AttemptOutcome:
    """The outcome of an attempt whose machine the provider reports gone under a run that
    still needed it (no word from the agent); ``node``: the rank of a gang's node lost."""
    why = f"machine {state.value.lower()}" + (f": {detail}" if detail else "")
    if state == InstanceState.PREEMPTED:
        return AttemptOutcome(
            kind=OutcomeKind.PREEMPTED, reason=why, cause=StopCause.PREEMPTION, node=node
        )
    return AttemptOutcome(kind=OutcomeKind.FAILED, reason=why, node=node)


def stopped_by(cause: StopCause, reason: str) -> AttemptOutcome:
    """The outcome of an attempt the controller stopped (budget, deadline, idle, the user)."""
    return AttemptOutcome(kind=OutcomeKind.STOPPED, reason=reason, cause=cause)
