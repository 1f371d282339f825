"""`image:` on the pool, end to end: real ``corral worker`` processes on the local Redis, a real
controller and store. A worker whose machine has a container engine (a real podman, where this
machine can run one) runs the job in the image; one without fails the attempt in one line,
before anything runs, and the run is not left running on the worker's host."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.queue.settings import PoolSettings
from corral.store import Store
from support import podman
from support.pool import Workers

pytestmark = pytest.mark.slow
ENDED = {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}


@pytest.fixture
def workers(pool: PoolSettings, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(pool, tmp_path / "machines", fake_gpus="L40S:1")
    try:
        yield w
    finally:
        w.stop_all()


def _run(tmp_path: Path, body: str) -> tuple[str, str, str]:
    """The run's id, its end state and reason, and its logs."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "data.txt").write_text("shipped to the worker\n")
    run_id = submit(write_spec(work, body))
    store = Store.open()
    controller = start_controller(tick=0.2)
    try:
        run = wait_for(store, run_id, ENDED, timeout=120)
    finally:
        controller.terminate()
        controller.wait(10)
    logs = subprocess.run(
        [sys.executable, "-m", "corral.cli", "logs", run_id],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    ).stdout
    return run.state, run.reason or "", logs


def test_a_pool_job_with_image_runs_in_it_on_the_worker(
    workers: Workers, tmp_path: Path, monkeypatch
) -> None:
    for key, value in podman.engine().items():  # the workers inherit it
        monkeypatch.setenv(key, value)
    workers.start("m0", "0", cpu_slots=1)
    body = f"""
        name: pooled
        image: {podman.IMAGE}
        run: cat /etc/os-release; cat data.txt; echo "in $PWD"
        """
    state, reason, logs = _run(tmp_path, body)
    assert state == "SUCCEEDED", (reason, logs)
    assert podman.MARKER in logs and "shipped to the worker" in logs
    assert "/corral/runs/" in logs  # the worker's own copy of the code, mounted in place


def test_a_worker_without_an_engine_fails_the_attempt_in_one_line(
    workers: Workers, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CORRAL_CONTAINER_ENGINE", "/nonexistent/podman")
    workers.start("m0", "0", cpu_slots=1)
    marker = tmp_path / "ran-on-the-host"
    body = f"""
        name: refused
        image: {podman.IMAGE}
        run: touch {marker}
        """
    state, reason, _ = _run(tmp_path, body)
    assert state == "FAILED"
    assert "needs a container engine" in reason and "\n" not in reason, reason
    assert not marker.exists()  # never run on the host instead
