"""Ending attempts: what the final sync before teardown must learn from the agent."""

from __future__ import annotations

from pathlib import Path

from corral.control.controller import Controller, reconcile
from corral.errors import NoCapacity
from corral.providers.base import Bootstrap, Instance, InstanceState, Offer
from corral.store.states import ResourceState, RunState

from .unitkit import TS, rig

TWO_STAGES = """\
stages:
  - {name: prep, run: echo prep}
  - {name: train, needs: [prep], run: echo train}
"""


def test_a_stage_that_ended_just_before_a_preemption_is_not_run_again(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING, job=TWO_STAGES)
    # prep succeeded and train started; then the machine was preempted before the controller
    # polled the agent again: only the agent's event stream knows that prep is done
    r.agent.emitted = [
        {"seq": 1, "ts": TS, "type": "stage.started", "stage": "prep", "data": {}},
        {
            "seq": 2,
            "ts": TS,
            "type": "stage.finished",
            "stage": "prep",
            "data": {"state": "succeeded"},
        },
        {"seq": 3, "ts": TS, "type": "stage.started", "stage": "train", "data": {}},
    ]
    r.agent.phase = "preempted"  # its last answer: no stage in the status, the events only
    r.provider.state = InstanceState.PREEMPTED
    plans: list[Bootstrap] = []

    def launch(offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        plans.append(bootstrap)
        raise NoCapacity("full")  # the next attempt waits: its plan is what matters

    r.provider.launch = launch  # type: ignore[method-assign]
    for _ in range(4):
        reconcile(r.ctx, r.run())
        r.clock.advance(6)
        if plans:
            break
    run = r.run()
    assert run.state == RunState.RECOVERING, (run.state, run.reason)
    assert run.completed_stages == ["prep"]
    assert plans and plans[0].plan.skip_stages == ["prep"]


def test_the_leak_sweep_tells_each_provider_the_runs_not_yet_over(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    (tmp_path / "over").mkdir()
    over = rig(tmp_path / "over", RunState.PENDING).run_id
    r.store.transition(over, RunState.CANCELLED, "user")
    calls: list[tuple[set[str], set[str] | None]] = []

    def sweep(active_keys, active_runs=None):  # type: ignore[no-untyped-def]
        calls.append((set(active_keys), None if active_runs is None else set(active_runs)))
        return []

    r.provider.sweep = sweep  # type: ignore[method-assign]
    r.ctx.settings.sweep_interval_s = 0
    Controller(r.ctx).tick()
    assert calls == [({f"{r.run_id}-a1"}, {r.run_id})]


def test_the_leak_sweep_keeps_a_gang_s_node_kept_under_its_first_launch_key(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path, RunState.RUNNING)
    # a repaired gang's kept node: a row of attempt 2 whose machine has attempt 1's key
    offer = Offer(provider=r.provider.name, offer_id="o", region="r")
    kept = Instance(
        provider=r.provider.name, instance_id="m1", key=f"{r.run_id}-a1-k1", offer=offer
    )
    r.store.record_intent(
        run_id=r.run_id, attempt=1, provider=r.provider.name, key=f"{r.run_id}-a2-k1",
        data={"rank": 1},
    )  # fmt: skip
    r.store.update_resource(
        f"{r.run_id}-a2-k1", state=ResourceState.ACTIVE, instance_id="m1",
        instance=kept.model_dump(mode="json"),
    )  # fmt: skip
    calls: list[set[str]] = []

    def sweep(active_keys, active_runs=None):  # type: ignore[no-untyped-def]
        calls.append(set(active_keys))
        return []

    r.provider.sweep = sweep  # type: ignore[method-assign]
    r.ctx.settings.sweep_interval_s = 0
    Controller(r.ctx).tick()
    assert calls and f"{r.run_id}-a1-k1" in calls[0] and f"{r.run_id}-a2-k1" in calls[0]


LIMIT = "memory limit: the job used 300 MiB, over its 128 MiB limit (corral worker --job-memory)"


def test_a_job_killed_past_its_machines_limit_fails_the_run_and_is_not_recovered(
    tmp_path: Path,
) -> None:
    r = rig(tmp_path, RunState.RUNNING, spec_extra="recovery: {max_error_restarts: 3}\n")
    r.agent.phase = "failed"  # the stage died of the kill: the agent reports a failure
    r.provider.limit = LIMIT  # the machine says why
    for _ in range(4):
        reconcile(r.ctx, r.run())
        r.clock.advance(6)
    run = r.run()
    assert (run.state, run.reason) == (RunState.FAILED, LIMIT)
    [attempt] = r.store.attempts(r.run_id)
    assert attempt.exit_reason == "failed"
    assert attempt.data["outcome"]["over_limit"] is True


def test_a_plain_failure_is_still_recovered_as_the_spec_says(tmp_path: Path) -> None:
    r = rig(tmp_path, RunState.RUNNING, spec_extra="recovery: {max_error_restarts: 3}\n")
    r.agent.phase = "failed"
    launched: list[str] = []

    def launch(offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        launched.append(key)
        raise NoCapacity("full")

    r.provider.launch = launch  # type: ignore[method-assign]
    reconcile(r.ctx, r.run())
    assert r.run().state == RunState.RECOVERING
    assert launched == [f"{r.run_id}-a2"]  # a second attempt, as max_error_restarts allows
