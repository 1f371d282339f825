"""The bell with real agents (``agent.bell``, ``control.bell``) at the quiet pace of a belled
run (``CORRAL_QUIET_POLL_INTERVAL``, 30 s by default): what changes on a machine reaches the
controller within 2 s (issue #33), a preemption's stop and a job's end included, with no nudge
and no look due before then. ``tests/control/test_bell.py`` checks the mechanism with stand-in
agents; this, the agent's own rings: each comes once what it announces can be seen."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.providers.registry import get_provider
from corral.store import Store
from support.waiting import wait_until

from .helpers import start_controller, submit, wait_for, write_spec

pytestmark = pytest.mark.slow

#: the quiet pace: a change that waited for a look would wait this long
QUIET_S = 30.0

SPOTTY = """
    name: spotty
    stages:
      - name: main
        run: |
          if [ "$CORRAL_ATTEMPT" = 1 ]; then
            trap 'exit 75' TERM; touch up; sleep 60 & wait
          fi
          sleep 3
    recovery: {max_preemption_restarts: 3}
"""


def _moved(store: Store, run_id: str, to: str, attempt: int) -> float:
    [at] = [
        e.ts.timestamp()
        for e in store.events(run_id, types=["run.state"])
        if e.data.get("to") == to and e.attempt == attempt
    ]
    return at


def test_a_preemption_and_a_job_s_end_reach_a_controller_at_the_quiet_pace_within_2s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_QUIET_POLL_INTERVAL", str(QUIET_S))
    work = tmp_path / "work"
    work.mkdir()
    run_id = submit(write_spec(work, SPOTTY))
    store = Store.open()
    proc = start_controller()
    try:
        wait_until(lambda: (work / "up").exists(), 60, 0.05, "attempt 1's stage")
        wait_until(lambda: store.get_run(run_id).state == "RUNNING", 30, 0.05, "RUNNING")
        time.sleep(1.0)  # its looks are at the quiet pace now: the next is seconds away
        [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
        local = get_provider("local")
        [inst] = [i for i in local.list_instances() if i.instance_id == res.instance_id]
        preempted_at = time.time()
        local.preempt(inst, grace=5.0)  # the provider alone: no nudge of the controller
        wait_until(lambda: store.get_run(run_id).attempt == 2, QUIET_S + 15, 0.05, "attempt 2")
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    assert [a.exit_reason for a in store.attempts(run_id)] == ["preempted", "succeeded"]
    # the agent's stop (rung) is seen, and the run recovering, at once
    recovering = _moved(store, run_id, "RECOVERING", 1)
    assert recovering - preempted_at <= 2.0, recovering - preempted_at
    # the job's end (rung) is acted on at once, not at the next quiet look
    [ended] = [
        e.ts.timestamp() for e in store.events(run_id, types=["attempt.finished"]) if e.attempt == 2
    ]
    stopping = _moved(store, run_id, "STOPPING", 2)
    assert stopping - ended <= 2.0, stopping - ended
