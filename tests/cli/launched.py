"""Helpers shared by the multi-GPU launcher recipes (``torchrun``, ``accelerate launch``): a
two-rank job launched with ``corral launch`` on the local provider (two declared GPUs) or on the
fake cloud (one kind of machine with two GPUs), preempted by hand, stopped with ``corral stop``,
and the checks every launcher's stage must pass."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD
from corral.store import Store
from support.waiting import wait_until

from .helpers import wait_state
from .test_debug import cli

#: one kind of machine with two GPUs, a notice long enough for the save
TWO_GPUS = {
    "offers": [
        {"id": "l40s-2", "region": "us-east", "gpu_type": "L40S", "gpu_count": 2, "spot_price": 0.5}
    ],
    "launch_delay_s": 0.2,
    "notice_s": 20.0,
}


def launch(
    provider: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    files: dict[str, str],
) -> tuple[str, Path]:
    """Write ``files`` and the spec (``{provider}`` filled in) to ``tmp_path``, point corral at
    the provider (two GPUs either way) and ``corral launch --detach`` it: the run's id and its
    checkpoint directory as the test sees it (on the fake cloud: the run's volume)."""
    if provider == "fake":
        cloud = tmp_path / "cloud.json"
        cloud.write_text(json.dumps(TWO_GPUS))
        monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
        monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    else:
        monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    body = textwrap.dedent(spec).lstrip().replace("{provider}", provider)
    (tmp_path / "corral.yaml").write_text(body)
    code, out, err = cli("launch", str(tmp_path / "corral.yaml"), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    home = Path(os.environ["CORRAL_HOME"])
    runs = home / "runs" if provider == "local" else home / "fake" / "volumes"
    return run_id, runs / run_id / "checkpoints"


def preempt_twice(run_id: str, up: Callable[[int], bool], timeout: float = 120) -> dict[str, Any]:
    """``corral debug preempt`` attempts 1 and 2 once ``up(attempt)`` says all their ranks run;
    the run's status once it has ended."""
    for attempt in (1, 2):
        wait_until(lambda n=attempt: up(n), timeout, message=f"attempt {attempt}'s 2 ranks")
        code, _, err = cli("debug", "preempt", run_id, "--grace", "20", "--json")
        assert code == 0, err
    return wait_state(run_id, {"SUCCEEDED", "FAILED"}, timeout=180)


def assert_preempted_twice_then_succeeded(run_id: str, run: dict[str, Any]) -> None:
    """Three attempts, the first two preempted. The launcher's own code after the stop (1, or
    137 at the grace) is not the stage's: the stage corral stopped ends preempted and
    resumable, 75, as a job that exits 75 does."""
    assert run["state"] == "SUCCEEDED", run["reason"]
    assert run["attempt"] == 3
    store = Store.open()
    reasons = [a.exit_reason for a in store.attempts(run_id)]
    assert reasons == ["preempted", "preempted", "succeeded"], reasons
    ends = [
        (e.attempt, e.data.get("state"), e.data.get("exit_code"))
        for e in store.events(run_id, types=["stage.finished"])
    ]
    assert ends == [(1, "preempted", 75), (2, "preempted", 75), (3, "succeeded", 0)], ends


def stop_and_assert_stopped(run_id: str, up: Callable[[], bool]) -> None:
    """``corral stop`` once ``up()`` says the ranks run: the run is STOPPED, its stage stopped
    with 75 ("stopped, resumable") whatever the launcher exited with, the attempt stopped by
    the user."""
    wait_until(up, 120, message="2 ranks")
    code, _, err = cli("stop", run_id)
    assert code == 0, err
    run = wait_state(run_id, {"STOPPED", "SUCCEEDED", "FAILED"}, timeout=60)
    assert run["state"] == "STOPPED", run["reason"]
    (stage,) = run["stages"]
    assert (stage["state"], stage["exit_code"]) == ("stopped", 75)
    (attempt,) = Store.open().attempts(run_id)
    assert attempt.data["outcome"]["kind"] == "stopped"
    assert attempt.data["outcome"]["cause"] == "user"
