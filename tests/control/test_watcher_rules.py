"""Each watcher's rules and resets on a test clock, and the registry's failure isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.control import monitor, transitions
from corral.control.observe import Observation
from corral.control.transitions import AskStop, Note, Step, Transition
from corral.control.watchers import (
    WATCHERS,
    BudgetWatcher,
    DeadlineWatcher,
    HealthWatcher,
    IdleWatcher,
    PreemptionWatcher,
    Watcher,
    run_watchers,
)
from corral.errors import ProviderError
from corral.providers.base import InstanceState
from corral.spec import JobSpec
from corral.store import RunRecord
from corral.store.states import RunState
from corral.wire.outcome import StopCause

from .unitkit import Rig, rig


def check(r: Rig, watcher: Watcher) -> Step | None:
    """One tick of one watcher (a fresh observation, as the controller makes each tick)."""
    run = r.run()
    return watcher.check(r.ctx, run, r.ctx.spec(run), Observation(r.ctx, run))


def test_the_registry_holds_every_watcher_once() -> None:
    names = [w.name for w in WATCHERS]
    assert sorted(names) == ["budget", "caps", "deadline", "gang", "health", "idle", "preemption"]


# --- health ----------------------------------------------------------------------------------


def test_a_silent_agent_is_noted_once_after_the_grace_and_never_recovered(tmp_path: Path) -> None:
    r = rig(tmp_path)
    health = HealthWatcher()
    r.agent.answers = False
    assert check(r, health) is None  # the silence starts now
    r.clock.advance(59)
    assert check(r, health) is None
    r.clock.advance(2)
    step = check(r, health)
    assert isinstance(step, Note) and step.type == "agent.unreachable"
    assert "stub reports the machine RUNNING" in step.reason
    r.clock.advance(600)
    assert check(r, health) is None  # once per silence, never a transition


def test_an_answer_resets_the_silence_and_a_new_silence_is_noted_again(tmp_path: Path) -> None:
    r = rig(tmp_path)
    health = HealthWatcher()
    r.agent.answers = False
    check(r, health)
    r.clock.advance(61)
    assert isinstance(check(r, health), Note)
    r.agent.answers = True
    back = check(r, health)
    assert isinstance(back, Note) and back.type == "agent.reachable"
    assert check(r, health) is None  # said once
    r.agent.answers = False
    assert check(r, health) is None  # a new silence starts its own timer
    r.clock.advance(30)
    assert check(r, health) is None
    r.clock.advance(31)
    step = check(r, health)
    assert isinstance(step, Note) and step.type == "agent.unreachable"


def test_a_silent_agent_on_a_gone_machine_is_left_to_the_preemption_watcher(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path)
    r.agent.answers = False
    r.provider.state = InstanceState.TERMINATED
    r.clock.advance(1000)
    assert check(r, HealthWatcher()) is None


def test_provision_timeout_fails_an_attempt_whose_agent_never_got_ready(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.PROVISIONING)
    health = HealthWatcher()
    r.agent.ready_ = False
    r.clock.advance(600)
    assert check(r, health) is None
    r.clock.advance(1)
    step = check(r, health)
    assert isinstance(step, Transition) and step.target == RunState.STOPPING
    assert step.heading == RunState.FAILED and "within 600s (stub)" in step.reason
    r.agent.ready_ = True  # ready at the last moment: the handler moves it to RUNNING instead
    assert check(r, health) is None


def test_provision_timer_restarts_with_a_relaunched_attempt(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.PROVISIONING)
    r.agent.ready_ = False
    r.clock.advance(601)
    r.store.update_attempt(r.run_id, 1, started_at=r.clock())
    assert check(r, HealthWatcher()) is None


# --- preemption ------------------------------------------------------------------------------


def test_the_provider_is_polled_every_provider_poll_s_while_the_agent_answers(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path)
    watcher = PreemptionWatcher()
    assert check(r, watcher) is None and r.provider.status_calls == 1
    r.clock.advance(4)
    assert check(r, watcher) is None and r.provider.status_calls == 1
    r.clock.advance(1)
    assert check(r, watcher) is None and r.provider.status_calls == 2


def test_a_preemption_notice_asks_for_one_graceful_stop(tmp_path: Path) -> None:
    r = rig(tmp_path)
    watcher = PreemptionWatcher()
    r.provider.state = InstanceState.PREEMPTED
    step = check(r, watcher)
    assert isinstance(step, AskStop) and step.cause == StopCause.PREEMPTION
    transitions.apply(r.ctx, r.run(), step)
    assert r.agent.stops == [(StopCause.PREEMPTION, step.reason)]
    r.clock.advance(10)
    assert check(r, watcher) is None  # asked once per attempt
    assert r.run().state == RunState.RUNNING  # the agent's own end recovers the run


def test_a_machine_killed_under_a_live_agent_loses_the_attempt(tmp_path: Path) -> None:
    r = rig(tmp_path, spec_extra="recovery: {max_error_restarts: 1}\n")
    r.provider.state = InstanceState.FAILED
    step = check(r, PreemptionWatcher())
    assert isinstance(step, Transition) and step.target == RunState.RECOVERING
    assert step.attempt_outcome is not None and step.attempt_outcome.kind == "failed"
    assert step.attempt_outcome.reason == "machine failed: stub"


def test_a_gone_machine_under_a_silent_agent_is_seen_every_tick(tmp_path: Path) -> None:
    r = rig(tmp_path)
    watcher = PreemptionWatcher()
    r.agent.answers = False
    assert check(r, watcher) is None
    r.provider.state = InstanceState.PREEMPTED
    step = check(r, watcher)  # no poll interval: the agent said nothing
    assert isinstance(step, Transition) and step.target == RunState.RECOVERING
    assert step.attempt_outcome is not None and step.attempt_outcome.kind == "preempted"


def test_a_new_agent_answering_for_the_attempt_loses_it_as_preempted(tmp_path: Path) -> None:
    """A container restarted on another machine at the same address: its agent begins the
    attempt again from its plan; the controller ends the attempt at the first answer of it,
    before the provider says anything."""
    r = rig(tmp_path)
    watcher = PreemptionWatcher()
    r.agent.started_at = "2030-01-01T00:00:00.100Z"
    run = r.run()
    assert monitor.handle_running(r.ctx, run, Observation(r.ctx, run)) is None  # stored
    r.clock.advance(2)
    assert check(r, watcher) is None  # the same agent
    r.agent.started_at = "2030-01-01T00:00:09.300Z"
    r.clock.advance(2)
    step = check(r, watcher)
    assert isinstance(step, Transition) and step.target == RunState.RECOVERING
    assert step.attempt_outcome is not None and step.attempt_outcome.kind == "preempted"
    assert "the node was replaced" in step.attempt_outcome.reason
    assert r.provider.status_calls == 1  # the provider was not needed to see it


# --- budget, deadline, idle ------------------------------------------------------------------


def test_budget_warns_once_and_a_restarted_controller_does_not_warn_again(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path, spec_extra="budget: {max_cost_usd: 10.0, warn_at: 0.5}\n")
    r.store.update_attempt(r.run_id, 1, price_per_hour=3600.0)  # $1 a second
    r.ctx.settings.budget_stop_estimate_s = 1.0
    budget = BudgetWatcher()
    r.clock.advance(6)
    step = check(r, budget)
    assert isinstance(step, Note) and step.type == "budget.warning"
    transitions.apply(r.ctx, r.run(), step)
    assert check(r, budget) is None
    r.ctx.run_notes.clear()  # a restarted controller: the event in the store says it was given
    assert check(r, budget) is None
    # checked every 0.5 s, the stop reserves $1.25 (the 1 s estimate and its margin) + $0.5
    # (the wait for the next check): it comes at $8.5, never later
    r.ctx.settings.tick_seconds = 0.5
    for _ in range(10):
        if (stop := check(r, budget)) is not None:
            break
        r.clock.advance(0.5)
    assert isinstance(stop, Transition)
    assert stop.cause == StopCause.BUDGET and stop.graceful
    assert stop.events[0].data["cost_usd"] == 8.5


def test_budget_reserves_the_gap_between_two_checks(tmp_path: Path) -> None:
    r = rig(tmp_path, spec_extra="budget: {max_cost_usd: 10.0}\n")
    r.store.update_attempt(r.run_id, 1, price_per_hour=3600.0)  # $1 a second
    r.ctx.settings.budget_stop_estimate_s = 1.0
    r.ctx.settings.tick_seconds = 0.1
    budget = BudgetWatcher()
    r.clock.advance(6)
    assert check(r, budget) is None  # $6 + 1.25 + 0.1
    r.clock.advance(2)
    # $8 + $1.25 for the stop alone is under the cap, but a controller that checks only
    # every 2 s would reach $10 before it checks again
    assert isinstance(check(r, budget), Transition)


def test_deadline_counts_from_the_first_running(tmp_path: Path) -> None:
    r = rig(tmp_path, spec_extra="limits: {max_runtime: 10s}\n")
    deadline = DeadlineWatcher()
    r.clock.advance(9)
    assert check(r, deadline) is None
    r.clock.advance(1)
    stop = check(r, deadline)
    assert isinstance(stop, Transition) and stop.reason == "deadline"
    assert stop.events[0].type == "deadline.stop"


def _cache_status(r: Rig, step: int | None, util: float = 0.0) -> None:
    status = {
        "run_id": r.run_id,
        "attempt": 1,
        "phase": "running",
        "stages": [{"name": "train", "state": "running", "progress": {"step": step}}],
        "gpus": [{"id": "0", "utilization_pct": util}],
    }
    r.store.update_attempt(r.run_id, 1, data={"status": status})


def test_idle_timer_resets_on_progress_and_on_a_busy_gpu(tmp_path: Path) -> None:
    r = rig(tmp_path, spec_extra="limits: {idle_timeout: 10s}\n")
    idle = IdleWatcher()
    _cache_status(r, step=1)
    assert check(r, idle) is None  # the timer starts
    r.clock.advance(9)
    _cache_status(r, step=2)  # progress: reset
    assert check(r, idle) is None
    r.clock.advance(9)
    _cache_status(r, step=2, util=90.0)  # a busy GPU: reset
    assert check(r, idle) is None
    r.clock.advance(9)
    _cache_status(r, step=2)
    assert check(r, idle) is None
    r.clock.advance(10)
    stop = check(r, idle)
    assert isinstance(stop, Transition) and stop.reason == "idle"


def test_the_idle_watcher_asks_the_agent_before_it_stops_a_run_on_an_old_copy(
    tmp_path: Path,
) -> None:
    # a belled quiet run's status is copied rarely (control.bell): progress made since the
    # last copy must not be taken for idleness
    r = rig(tmp_path, spec_extra="limits: {idle_timeout: 10s}\n")
    idle = IdleWatcher()
    _cache_status(r, step=1)
    assert check(r, idle) is None  # the timer starts
    r.clock.advance(11)
    r.agent.stages = [{"name": "train", "state": "running", "progress": {"step": 5}}]
    assert check(r, idle) is None  # the agent says step 5: work, the timer restarts
    r.clock.advance(11)
    _cache_status(r, step=5)
    stop = check(r, idle)  # nothing since: idle
    assert isinstance(stop, Transition) and stop.reason == "idle"


# --- isolation -------------------------------------------------------------------------------


class Broken(Watcher):
    name = "broken"

    def check(self, ctx, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        raise RuntimeError("watcher bug")


class Noting(Watcher):
    name = "noting"

    def check(self, ctx, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        return Note("noting.seen", "seen")


def test_a_failing_watcher_stops_neither_the_others_nor_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = rig(tmp_path, spec_extra="limits: {max_runtime: 1s}\n")
    r.clock.advance(5)
    run = r.run()
    watchers = (Broken(), Noting(), DeadlineWatcher())
    step = run_watchers(r.ctx, run, Observation(r.ctx, run), watchers)
    assert isinstance(step, Transition) and step.reason == "deadline"
    assert len(r.store.events(r.run_id, types=["noting.seen"])) == 1
    assert "watcher broken failed: watcher bug" in caplog.text


def test_a_provider_error_in_a_watcher_is_not_fatal(tmp_path: Path) -> None:
    r = rig(tmp_path)
    r.provider.fail = ProviderError("the cloud API is down")
    run = r.run()
    assert run_watchers(r.ctx, run, Observation(r.ctx, run)) is None
