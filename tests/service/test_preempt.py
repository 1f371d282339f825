"""Preempting a run's machine through the service: a run on the fake spot cloud is preempted
and recovered by the controller; a finished run, a run with no machine and a bad grace are
clear errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from control.helpers import write_spec
from corral.errors import BadInput, Conflict
from corral.providers.base import InstanceState
from corral.providers.fake import ENV_FAKE_CLOUD
from corral.service.actions import wait_for_end
from corral.service.preempt import preempt_run
from corral.service.submit import submit_run
from corral.store import Store

from .helpers import record_run

SPOTTY = """
    name: spotty
    resources: {providers: [fake]}
    run: |
      cd "$CORRAL_CHECKPOINT_DIR"
      echo "attempt $CORRAL_ATTEMPT" >> attempts.txt
      if [ "$CORRAL_ATTEMPT" = 1 ]; then
        trap 'echo noticed >> attempts.txt; exit 75' TERM; touch up; sleep 60 & wait
      fi
"""


@pytest.mark.slow
def test_a_preempted_fake_cloud_run_is_recovered(
    tmp_path: Path, monkeypatch, corral_home: Path
) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({"launch_delay_s": 0.2, "notice_s": 5.0}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    run_id = submit_run(write_spec(tmp_path, SPOTTY)).run.id
    # the machines share no file with this one: the markers are on the fake cloud's volume
    volume = corral_home / "fake" / "volumes" / run_id / "checkpoints"
    deadline = time.monotonic() + 60
    while not (volume / "up").exists():  # attempt 1 runs and its trap is set
        assert time.monotonic() < deadline, "attempt 1 never started"
        time.sleep(0.05)
    done = preempt_run(run_id, grace=3)
    assert (done.run_id, done.attempt, done.provider, done.key) == (
        run_id,
        1,
        "fake",
        f"{run_id}-a1",
    )
    assert done.instance_state in {InstanceState.PREEMPTED, InstanceState.TERMINATED}
    assert done.to_json()["grace_s"] == 3.0
    run = wait_for_end(run_id, timeout_s=90)
    assert (run.state, run.attempt) == ("SUCCEEDED", 2), run.reason
    assert Store.open().attempts(run_id)[0].exit_reason == "preempted"
    assert (volume / "attempts.txt").read_text() == "attempt 1\nnoticed\nattempt 2\n"


def test_a_run_without_a_machine_or_finished_is_a_conflict_and_bad_grace_bad_input() -> None:
    store = Store.open()
    run_id = record_run(store)
    with pytest.raises(Conflict, match=r"\(PENDING, attempt 0\) has no launched machine"):
        preempt_run(run_id)
    store.transition(run_id, "SUCCEEDED", "done")
    with pytest.raises(Conflict, match=f"run {run_id} is SUCCEEDED: it has no machine"):
        preempt_run(run_id)
    with pytest.raises(BadInput, match="grace must be >= 0 seconds, not -1"):
        preempt_run(run_id, grace=-1)
