"""Helpers for controller tests: write small job specs, run a controller, wait for states."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.control.controller import Controller
from corral.control.lock import running_pid
from corral.store import Store
from support import controller_logs
from support.waiting import wait_until


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
    """A real controller process for the test's CORRAL_HOME (its output in
    ``controller-test.log``, which a failed test's report shows)."""
    home = Path(os.environ["CORRAL_HOME"])
    controller_logs.started(home / "controller-test.log")
    with open(home / "controller-test.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral.control", "--tick", str(tick), "--idle-exit", "60"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def locked() -> bool:
        if running_pid(home) == proc.pid:
            return True
        if proc.poll() is not None:
            raise AssertionError("controller exited: " + (home / "controller-test.log").read_text())
        return False

    wait_until(locked, 20, 0.02, "the controller to take the lock")
    return proc


def wait_for(store: Store, run_id: str, states: set[str], timeout: float = 60.0) -> Any:
    seen = [store.get_run(run_id)]

    def reached() -> Any:
        seen[0] = store.get_run(run_id)
        return seen[0] if seen[0].state in states else None

    def still() -> str:
        log = Path(os.environ["CORRAL_HOME"]) / "controller-test.log"
        return f"run {run_id} to be {states}; it is {seen[0].state} ({seen[0].reason})\n" + (
            log.read_text()[-3000:] if log.exists() else ""
        )

    return wait_until(reached, timeout, message=still)


def tick_until(
    controller: Controller,
    store: Store,
    run_id: str,
    until: Callable[[Any], bool],
    timeout: float = 60.0,
) -> Any:
    """Tick an in-process ``controller`` every 0.1 s until ``until(run)`` holds; that run."""

    def ticked() -> Any:
        controller.tick()
        run = store.get_run(run_id)
        return run if until(run) else None

    return wait_until(
        ticked,
        timeout,
        0.1,
        lambda: f"run {run_id} to move on; stuck in {store.get_run(run_id).state}",
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
