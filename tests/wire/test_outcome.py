"""The end of an attempt is decided in one place (corral.wire.outcome)."""

from __future__ import annotations

import pytest

from corral.wire.env import EXIT_PREEMPTED
from corral.wire.machine import InstanceState
from corral.wire.outcome import (
    AttemptOutcome,
    OutcomeKind,
    StopCause,
    attempt_phase,
    from_agent,
    from_machine,
    stage_exit_code,
    stage_state,
    stopped_by,
)
from corral.wire.status import AgentStatus, Phase, StageState


def status(phase: str, **fields: object) -> AgentStatus:
    return AgentStatus.model_validate({"run_id": "r", "attempt": 1, "phase": phase, **fields})


@pytest.mark.parametrize(
    ("code", "stopped", "state"),
    [
        (0, False, StageState.SUCCEEDED),
        (0, True, StageState.STOPPED),
        (EXIT_PREEMPTED, False, StageState.PREEMPTED),
        (EXIT_PREEMPTED, True, StageState.PREEMPTED),
        (1, False, StageState.FAILED),
        (-15, True, StageState.STOPPED),
        (None, False, StageState.FAILED),
    ],
)
def test_stage_state_from_exit_code(code, stopped, state):
    assert stage_state(code, stopped=stopped) == state


@pytest.mark.parametrize(
    ("code", "stopped", "launcher", "ends"),
    [
        # a launcher the agent stopped: its own code (torchrun: 1 when signalled) says nothing
        # of its ranks; the stage was stopped, resumable
        (1, True, True, EXIT_PREEMPTED),
        (137, True, True, EXIT_PREEMPTED),
        (EXIT_PREEMPTED, True, True, EXIT_PREEMPTED),
        (0, True, True, 0),  # it finished anyway
        (1, False, True, 1),  # it failed on its own, before any stop: a failure
        (1, True, False, 1),  # no launcher: the job's own code
        (143, True, False, 143),
    ],
)
def test_a_stopped_launcher_ends_as_stopped_and_resumable(code, stopped, launcher, ends):
    assert stage_exit_code(code, stopped=stopped, launcher=launcher) == ends
    state = stage_state(ends, stopped=stopped)
    if stopped and launcher and code != 0:  # the same state as a job that exits 75 on a stop
        assert state == StageState.PREEMPTED
    if not stopped:
        assert state == StageState.FAILED


def test_only_failed_and_preempted_stages_end_the_attempt():
    assert attempt_phase(StageState.FAILED) == Phase.FAILED
    assert attempt_phase(StageState.PREEMPTED) == Phase.PREEMPTED
    for state in (StageState.SUCCEEDED, StageState.STOPPED, StageState.SKIPPED):
        assert attempt_phase(state) is None


def test_succeeded():
    out = from_agent(status("succeeded"))
    assert out == AttemptOutcome(kind=OutcomeKind.SUCCEEDED, reason="all stages succeeded")


def test_a_stage_exiting_75_is_a_preemption_naming_the_stage():
    out = from_agent(status("preempted", failed_stage="train", exit_code=75))
    assert (out.kind, out.reason, out.exit_code) == (
        OutcomeKind.PREEMPTED,
        "preempted (stage 'train')",
        75,
    )


def test_a_stop_is_a_preemption_when_the_provider_says_so_or_the_notice_asked_for_it():
    stopped = status("stopped", reason="agent received SIGTERM", stop_cause="agent")
    assert from_agent(stopped).kind == OutcomeKind.STOPPED
    by_provider = from_agent(stopped, InstanceState.PREEMPTED)
    assert (by_provider.kind, by_provider.cause) == (OutcomeKind.PREEMPTED, StopCause.PREEMPTION)
    noticed = from_agent(status("stopped", stop_cause="preemption"), InstanceState.RUNNING)
    assert noticed.kind == OutcomeKind.PREEMPTED


def test_a_stop_keeps_its_cause_and_reason():
    out = from_agent(status("stopped", reason="budget", stop_cause="budget"))
    assert (out.kind, out.cause, out.reason) == (OutcomeKind.STOPPED, StopCause.BUDGET, "budget")
    unknown = from_agent(status("stopped", stop_cause="gremlins"))
    assert (unknown.cause, unknown.reason) == (None, "the agent stopped")


def test_failure_reasons():
    setup = from_agent(status("failed", failed_stage="_setup", exit_code=2))
    assert setup.reason == "setup failed with exit code 2"
    stage = from_agent(status("failed", failed_stage="train", exit_code=1))
    assert (stage.kind, stage.reason, stage.failed_stage) == (
        OutcomeKind.FAILED,
        "stage 'train' exited with code 1",
        "train",
    )
    # a hook or the agent itself failed: no stage, no exit code; never "stage 'None'"
    hook = from_agent(status("failed", reason="artifacts: upload refused"))
    assert hook.reason == "artifacts: upload refused"


def test_a_running_attempt_has_no_outcome_yet():
    with pytest.raises(ValueError, match="has not ended"):
        from_agent(status("finishing"))


def test_machine_gone_under_the_run():
    pre = from_machine(InstanceState.PREEMPTED, "spot reclaimed")
    assert (pre.kind, pre.reason, pre.cause) == (
        OutcomeKind.PREEMPTED,
        "machine preempted: spot reclaimed",
        StopCause.PREEMPTION,
    )
    gone = from_machine(InstanceState.TERMINATED)
    assert (gone.kind, gone.reason) == (OutcomeKind.FAILED, "machine terminated")


def test_stopped_by_the_controller():
    out = stopped_by(StopCause.DEADLINE, "deadline")
    assert out.model_dump(mode="json") == {
        "kind": "stopped",
        "reason": "deadline",
        "cause": "deadline",
        "exit_code": None,
        "failed_stage": None,
        "over_limit": False,
        "cannot_boot": False,
        "node": None,
    }
    assert AttemptOutcome.model_validate(out.model_dump(mode="json")) == out
