"""Priorities on a provider without a queue (the local machine, one fake GPU): the waiting run
with the highest priority gets the next free GPU, equal priorities first come first served."""

from __future__ import annotations

import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.store import Store

pytestmark = pytest.mark.slow


def test_the_highest_priority_waiting_run_gets_the_free_gpu(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:1")
    spec = write_spec(
        tmp_path,
        """
        name: prio
        resources: {gpus: 1}
        run: echo "$CORRAL_RUN_ID" >> order.log && sleep 0.3
        """,
    )
    priorities = [1, 9, 5, 9]  # submitted in this order, while nothing runs them yet
    runs = [submit(spec, [f"priority={p}"]) for p in priorities]
    store = Store.open()
    proc = start_controller(tick=0.2)
    try:
        for run_id in runs:
            assert wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, 120).state == "SUCCEEDED"
    finally:
        proc.terminate()
        proc.wait(10)
    order = (tmp_path / "order.log").read_text().split()
    assert order == [runs[1], runs[3], runs[2], runs[0]]
