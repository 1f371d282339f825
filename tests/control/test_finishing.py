"""Ending attempts: what the final sync before teardown must learn from the agent."""

from __future__ import annotations

from pathlib import Path

from corral.control.controller import reconcile
from corral.errors import AgentUnreachable, NoCapacity
from corral.providers.base import Bootstrap, Instance, InstanceState, Offer
from corral.store.states import RunState

from .unitkit import rig

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
        {"seq": 1, "type": "stage.started", "stage": "prep", "data": {}},
        {"seq": 2, "type": "stage.finished", "stage": "prep", "data": {"state": "succeeded"}},
        {"seq": 3, "type": "stage.started", "stage": "train", "data": {}},
    ]
    r.agent.status = _unreachable  # type: ignore[method-assign]  # events only, no status
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


def _unreachable() -> None:
    raise AgentUnreachable("the machine is going away")
