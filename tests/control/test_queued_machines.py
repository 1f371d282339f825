"""A machine that waits in its provider's queue (the pool's queued attempts): not billed and
not timed out while it waits; billed and timed from when it left the queue."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from corral.control.controller import reconcile
from corral.control.cost import run_cost
from corral.providers.base import InstanceState
from corral.store.states import RunState

from .unitkit import rig


def test_a_queued_machine_is_neither_billed_nor_timed_out(tmp_path: Path) -> None:
    r = rig(tmp_path, state=RunState.PROVISIONING)
    r.store.update_attempt(r.run_id, 1, price_per_hour=3.6)  # $0.001 a second
    r.provider.state = InstanceState.PROVISIONING
    r.provider.queued = True
    r.agent.answers = False
    for _ in range(24):  # two hours in the queue, looked at every five minutes
        r.clock.advance(300)
        reconcile(r.ctx, r.run())
    run = r.run()
    assert run.state == RunState.PROVISIONING, run.reason  # the provision timeout is 600 s
    assert run.reason == "stub"  # the provider's word on why it waits
    assert run_cost(r.ctx, r.run_id) < 0.001 * 61  # at most a minute of it, not two hours
    # a worker takes it: billed from then on
    left = r.clock.now + timedelta(seconds=10)
    r.clock.advance(30)
    r.provider.queued = False
    r.provider.started_at = left
    reconcile(r.ctx, r.run())
    assert r.store.get_attempt(r.run_id, 1).started_at == left
    assert abs(run_cost(r.ctx, r.run_id) - 0.02) < 1e-6
    # and the provision timeout counts from there
    r.clock.advance(700)
    reconcile(r.ctx, r.run())
    assert r.run().state in (RunState.FAILED, RunState.STOPPING)
    assert "did not become ready" in r.run().reason
