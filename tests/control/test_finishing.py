"""Ending attempts: what the final sync before teardown must learn from the agent."""

from __future__ import annotations

from pathlib import Path

from corral.control.controller import Controller, reconcile
from corral.errors import NoCapacity
from corral.providers.base import Bootstrap, Instance, InstanceState, Offer
from corral.store.states import RunState

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
