"""Helpers for controller tests: write small job specs, run a controller, wait for states."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from corral.control.lock import running_pid
from corral.store import Store


def write_spec(dir_: Path, body: str, name: str = "corral.yaml") -> Path:
    path = dir_ / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def submit(spec_path: Path, overrides: list[str] | None = None) -> str:
    """Create a PENDING run from a spec, as `corral launch --detach` would, without launching."""
    from corral.spec import load_spec, spec_hash

    spec = load_spec(spec_path, overrides or [])
    store = Store.open()
    run = store.create_run(
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec_hash(spec),
        spec_path=str(spec_path),
        workdir=str(spec.workdir),
    )
    return run.id


def start_controller(tick: float = 0.1) -> subprocess.Popen:
    """A real controller process for the test's CORRAL_HOME."""
    home = Path(os.environ["CORRAL_HOME"])
    with open(home / "controller-test.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral.control", "--tick", str(tick), "--idle-exit", "60"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if running_pid(home) == proc.pid:
            return proc
        if proc.poll() is not None:
            raise AssertionError("controller exited: " + (home / "controller-test.log").read_text())
        time.sleep(0.02)
    raise AssertionError("controller did not take the lock")


def wait_for(store: Store, run_id: str, states: set[str], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    run = store.get_run(run_id)
    while time.monotonic() < deadline:
        run = store.get_run(run_id)
        if run.state in states:
            return run
        time.sleep(0.05)
    log = Path(os.environ["CORRAL_HOME"]) / "controller-test.log"
    raise AssertionError(
        f"run {run_id} is {run.state} ({run.reason}), not {states}\n"
        + (log.read_text()[-3000:] if log.exists() else "")
    )


def state_events(store: Store, run_id: str) -> list[str]:
    return [e.data.get("to") for e in store.events(run_id, types=["run.state"])]


def run_to_end(spec_path: Path, *, states: set[str] | None = None, timeout: float = 60.0) -> Any:
    """Submit a spec, run a real controller process until the run reaches ``states`` (default:
    SUCCEEDED or FAILED), stop the controller, and return the run."""
    run_id = submit(spec_path)
    proc = start_controller()
    try:
        return wait_for(Store.open(), run_id, states or {"SUCCEEDED", "FAILED"}, timeout=timeout)
    finally:
        proc.terminate()
        proc.wait(10)
