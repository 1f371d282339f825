"""The one applier of steps: compare-and-set, what is written before and after, and notes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from corral.control import transitions
from corral.control.context import Settings
from corral.control.controller import reconcile, start_attempt
from corral.control.transitions import AskStop, Note, Transition
from corral.errors import BadInput, NoCapacity
from corral.store.states import RunState
from corral.wire.outcome import AttemptOutcome, OutcomeKind, StopCause

from .unitkit import rig


def _claim() -> Transition:
    return Transition(
        RunState.PROVISIONING,
        "launching attempt 1",
        fields={"attempt": 1, "provider": "stub"},
        events=(Note("claim.test", "claimed"),),
    )


def test_a_claim_is_won_once_by_two_controllers_reading_the_same_run(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.PENDING)
    seen = r.run()  # both processes read the run PENDING
    first = transitions.apply(r.ctx, seen, _claim())
    second = transitions.apply(r.ctx, seen, _claim())
    assert first is not None and first.state == RunState.PROVISIONING and first.attempt == 1
    assert second is None
    states = [e.data["to"] for e in r.store.events(r.run_id, types=["run.state"])]
    assert states.count("PROVISIONING") == 1
    assert len(r.store.events(r.run_id, types=["claim.test"])) == 1


def test_a_lost_compare_and_set_writes_nothing(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    stale = r.run()
    r.store.transition(r.run_id, RunState.STOPPING, "someone else", outcome="CANCELLED")
    outcome = AttemptOutcome(kind=OutcomeKind.FAILED, reason="boom", exit_code=3)
    step = transitions.finish(
        RunState.FAILED,
        "boom",
        graceful=True,
        cause=StopCause.USER,
        attempt_outcome=outcome,
        events=(Note("after.test", "x"),),
    )
    assert transitions.apply(r.ctx, stale, step) is None
    attempt = r.store.get_attempt(r.run_id, 1)
    assert "outcome" not in attempt.data and attempt.exit_reason is None
    assert r.agent.stops == []  # no graceful stop asked for a transition that lost
    assert r.store.events(r.run_id, types=["after.test"]) == []
    assert r.run().outcome == "CANCELLED"


def test_a_graceful_finish_asks_the_agent_and_records_deadline_and_cause(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    step = transitions.finish(RunState.STOPPED, "budget", graceful=True, cause=StopCause.BUDGET)
    moved = transitions.apply(r.ctx, r.run(), step)
    assert moved is not None and moved.state == RunState.STOPPING and moved.outcome == "STOPPED"
    assert r.agent.stops == [(StopCause.BUDGET, "budget")]
    data = r.store.get_attempt(r.run_id, 1).data
    assert data["stop_deadline"] is not None
    assert AttemptOutcome.model_validate(data["outcome"]).cause == StopCause.BUDGET
    last = r.store.events(r.run_id, types=["run.state"])[-1]
    assert (last.data["from"], last.data["to"], last.reason) == ("RUNNING", "STOPPING", "budget")


def test_an_attempt_outcome_is_recorded_before_the_state_moves(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    outcome = AttemptOutcome(kind=OutcomeKind.PREEMPTED, reason="machine preempted")
    step = Transition(RunState.RECOVERING, "preempted", attempt_outcome=outcome)
    moved = transitions.apply(r.ctx, r.run(), step)
    assert moved is not None and moved.state == RunState.RECOVERING
    attempt = r.store.get_attempt(r.run_id, 1)
    assert attempt.exit_reason == "preempted"
    assert AttemptOutcome.model_validate(attempt.data["outcome"]) == outcome


def test_a_terminal_transition_forgets_the_runs_memory(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.PENDING)
    r.ctx.notes(r.run_id).budget_warned = True
    r.ctx.notes(r.run_id).attempt(1).unreachable_noted = True
    moved = transitions.apply(r.ctx, r.run(), Transition(RunState.CANCELLED, "user"))
    assert moved is not None and moved.terminal
    assert r.run_id not in r.ctx.run_notes
    assert r.ctx.notes(r.run_id).budget_warned is False  # a fresh one, were it asked again


def test_notes_and_stop_requests_leave_the_state_alone(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    assert transitions.apply(r.ctx, r.run(), Note("x.note", "hello", data={"a": 1})) is None
    ask = AskStop(StopCause.PREEMPTION, "preempting", Note("instance.preempting", "preempting"))
    assert transitions.apply(r.ctx, r.run(), ask) is None
    assert r.run().state == RunState.RUNNING
    (note,) = r.store.events(r.run_id, types=["x.note"])
    assert note.attempt == 1 and note.data == {"a": 1}
    assert r.agent.stops == [(StopCause.PREEMPTION, "preempting")]
    assert len(r.store.events(r.run_id, types=["instance.preempting"])) == 1


def test_an_attempts_end_runs_through_stopping_to_its_final_state_in_one_tick(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    r.agent.phase = "succeeded"
    reconcile(r.ctx, r.run())
    run = r.run()
    assert run.state == RunState.SUCCEEDED and run.reason == "all stages succeeded"
    states = [e.data["to"] for e in r.store.events(r.run_id, types=["run.state"])]
    assert states[-2:] == ["STOPPING", "SUCCEEDED"]
    assert not r.store.resources(run_id=r.run_id, open_only=True)
    outcome = r.store.get_attempt(r.run_id, 1).data["outcome"]
    assert outcome["kind"] == "succeeded"


def test_a_recovery_with_no_capacity_goes_back_to_waiting_once_per_tick(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    r.store.transition(r.run_id, RunState.RECOVERING, "preempted")
    r.provider.launch = _no_capacity  # type: ignore[method-assign]
    reconcile(r.ctx, r.run())
    run = r.run()
    assert run.state == RunState.RECOVERING and run.attempt == 1  # attempt 2 is tried again
    assert len(r.store.events(r.run_id, types=["provider.no_capacity"])) == 1


def _no_capacity(*_: object) -> None:
    raise NoCapacity("full")


def test_the_front_doors_launch_that_can_never_succeed_fails_the_run_at_once(
    tmp_path: Path,
) -> None:
    # `corral launch -d` prints the run's state right after the fast-path launch: FAILED,
    # as before the refactor, not a STOPPING left for the controller's next tick
    r = rig(tmp_path, RunState.PENDING)
    r.provider.launch = _bad_input  # type: ignore[method-assign]
    start_attempt(r.ctx, r.run())
    run = r.run()
    assert run.state == RunState.FAILED and run.reason == "launch failed: workdir is gone"
    assert not r.store.resources(run_id=r.run_id, open_only=True)
    assert len(r.store.events(r.run_id, types=["run.finished"])) == 1


def _bad_input(*_: object) -> None:
    raise BadInput("workdir is gone")


def test_a_graceful_stop_waits_for_the_longest_stage_grace(tmp_path: Path) -> None:
    def deadline_after(job: str) -> float:
        home = tmp_path / str(len(job))
        home.mkdir()
        r = rig(home, RunState.RUNNING, job=job)
        step = transitions.finish(RunState.STOPPED, "user", graceful=True, cause=StopCause.USER)
        transitions.apply(r.ctx, r.run(), step)
        deadline = datetime.fromisoformat(r.store.get_attempt(r.run_id, 1).data["stop_deadline"])
        return (deadline - r.ctx.clock()).total_seconds()

    margin = Settings().stop_margin_s
    assert deadline_after("run: echo hi\n") == 30 + margin
    assert deadline_after("run: echo hi\nstop_grace: 5m\n") == 300 + margin
