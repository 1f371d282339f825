"""The controller with the real local provider, real agents and a real controller process."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from corral.store import Store

from .helpers import run_to_end, start_controller, state_events, submit, wait_for, write_spec

pytestmark = pytest.mark.slow


def test_run_goes_through_its_states_and_keeps_stage_logs(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        name: two-stages
        stages:
          - name: prep
            run: echo prepared > prep.txt && echo "prep says hi"
          - name: train
            run: cat prep.txt && echo "stage=$CORRAL_STAGE run=$CORRAL_RUN_ID attempt=$CORRAL_ATTEMPT"
            needs: [prep]
    """,
    )
    run = run_to_end(spec)
    run_id, store = run.id, Store.open()
    assert run.state == "SUCCEEDED", run.reason
    assert state_events(store, run_id) == [
        "PENDING",
        "PROVISIONING",
        "RUNNING",
        "STOPPING",
        "SUCCEEDED",
    ]
    assert run.completed_stages == ["prep", "train"] or set(run.completed_stages) == {
        "prep",
        "train",
    }
    logs = Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs" / "a1"
    assert "prep says hi" in (logs / "prep.log").read_text()
    train = (logs / "train.log").read_text()
    assert "prepared" in train
    assert f"stage=train run={run_id} attempt=1" in train
    types = [e.type for e in store.events(run_id)]
    assert types.index("run.started") < types.index("run.finished")
    assert "stage.started" in types and "stage.finished" in types
    # the machine is gone before the run is SUCCEEDED: no open resource
    assert store.resources(run_id=run_id, open_only=True) == []


def test_failing_stage_fails_the_run_with_its_name_and_exit_code(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        """
        name: broken
        stages:
          - name: ok
            run: sleep 30
          - name: bad
            run: echo failing; exit 3
    """,
    )
    run = run_to_end(spec)
    assert run.state == "FAILED"
    assert run.failed_stage == "bad" and run.exit_code == 3
    assert "stage 'bad' exited with code 3" in run.reason


def test_controller_killed_mid_run_reattaches_without_launching_twice(tmp_path: Path) -> None:
    marker = tmp_path / "starts.txt"
    spec = write_spec(
        tmp_path,
        f"""
        name: survivor
        run: echo start >> {marker} && sleep 4 && echo done
    """,
    )
    run_id = submit(spec)
    store = Store.open()
    first = start_controller()
    wait_for(store, run_id, {"RUNNING"})
    os.kill(first.pid, signal.SIGKILL)  # no cleanup of any kind
    first.wait(10)
    time.sleep(0.5)
    second = start_controller()
    try:
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=60)
    finally:
        second.terminate()
        second.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    assert marker.read_text().count("start") == 1  # the job ran once
    assert run.attempt == 1 and len(store.attempts(run_id)) == 1
    home = Path(os.environ["CORRAL_HOME"])
    assert len(list((home / "local" / "instances").iterdir())) == 1  # one machine, ever
    assert "done" in (home / "runs" / run_id / "logs" / "a1" / "main.log").read_text()


def test_runs_never_share_a_gpu_and_the_second_waits_in_pending(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    out = tmp_path / "out"
    out.mkdir()
    body = """
        name: {name}
        resources: {{gpus: "L40S:2"}}
        run: echo "$CUDA_VISIBLE_DEVICES" > {out}/{name}.gpus && sleep {sleep}
    """
    first = submit(write_spec(tmp_path, body.format(name="first", out=out, sleep=3), "a.yaml"))
    second = submit(write_spec(tmp_path, body.format(name="second", out=out, sleep=0), "b.yaml"))
    proc = start_controller()
    store = Store.open()
    try:
        wait_for(store, first, {"RUNNING"})
        time.sleep(1.0)
        waiting = store.get_run(second)
        assert waiting.state == "PENDING"
        assert "waiting for capacity" in waiting.reason
        a = wait_for(store, first, {"SUCCEEDED", "FAILED"})
        b = wait_for(store, second, {"SUCCEEDED", "FAILED"})
    finally:
        proc.terminate()
        proc.wait(10)
    assert a.state == b.state == "SUCCEEDED"
    assert (out / "first.gpus").read_text().strip() == "0,1"
    assert (out / "second.gpus").read_text().strip() == "0,1"
    b_started = [
        e for e in store.events(second, types=["run.state"]) if e.data.get("to") == "RUNNING"
    ]
    a_done = [
        e for e in store.events(first, types=["run.state"]) if e.data.get("to") == "SUCCEEDED"
    ]
    assert b_started[0].ts >= a_done[0].ts


def _tree_gone(pids: list[int]) -> bool:
    return not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )


def test_cancel_terminates_the_machine_at_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    spec = write_spec(
        tmp_path,
        f"""
        name: cancel-me
        run: echo $$ > {pidfile}; sleep 300
    """,
    )
    run_id = submit(spec)
    proc = start_controller()
    store = Store.open()
    try:
        wait_for(store, run_id, {"RUNNING"})
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        store.request_action(run_id, "cancel")
        run = wait_for(store, run_id, {"CANCELLED", "FAILED", "SUCCEEDED", "STOPPED"})
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "CANCELLED"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _tree_gone([pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tree_gone([pid])


def test_stop_is_graceful_the_stage_sees_sigterm(tmp_path: Path) -> None:
    seen = tmp_path / "sigterm"
    script = tmp_path / "job.py"
    script.write_text(
        "import signal, sys, time, pathlib\n"
        f"def h(*a):\n    pathlib.Path({str(seen)!r}).write_text('term')\n    sys.exit(75)\n"
        "signal.signal(signal.SIGTERM, h)\nprint('ready', flush=True)\ntime.sleep(300)\n"
    )
    spec = write_spec(
        tmp_path,
        f"""
        name: stop-me
        run: python {script}
    """,
    )
    run_id = submit(spec)
    proc = start_controller()
    store = Store.open()
    try:
        wait_for(store, run_id, {"RUNNING"})
        log = Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs" / "a1" / "main.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "ready" not in (
            log.read_text() if log.exists() else ""
        ):
            time.sleep(0.05)  # the job is up and its SIGTERM handler is installed
        store.request_action(run_id, "stop")
        run = wait_for(store, run_id, {"CANCELLED", "FAILED", "SUCCEEDED", "STOPPED"})
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "STOPPED" and run.reason == "user"
    assert seen.read_text() == "term"
