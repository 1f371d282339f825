"""Controller processes of their own (``python -m corral.control``), each on its own home:
several controllers on one store, killed or stopped as a test needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from corral.control.lock import running_pid
from support import controller_logs
from support.waiting import wait_until


def start_controller(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """A controller on ``home`` with ``env`` over this process's environment (its output in
    ``home/controller-test.log``, which a failed test's report shows), once it holds the home's lock; ``args``: its options
    (default ``--tick 0.2``)."""
    home.mkdir(parents=True, exist_ok=True)
    full = {**os.environ, **env, "CORRAL_HOME": str(home)}
    controller_logs.started(home / "controller-test.log")  # a failed test's report shows it
    with open(home / "controller-test.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral.control", *(args or ("--tick", "0.2"))],
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def locked() -> bool:
        assert proc.poll() is None, (home / "controller-test.log").read_text()
        return running_pid(home) == proc.pid

    wait_until(locked, 30, 0.05, f"the controller of {home} to start")
    return proc


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM to each that runs, then wait (SIGKILL after 15 s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
