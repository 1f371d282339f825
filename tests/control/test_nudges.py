"""Nudges (control.nudges): a CLI asks the controller to look at one run now; the loop takes
the nudges at each read of the active runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.control.nudges import nudge, take_nudges
from corral.control.schedule import Result

from .unitkit import rig


def test_a_nudge_is_taken_once_and_a_name_that_is_not_a_run_id_is_ignored(tmp_path: Path) -> None:
    nudge("r-1", tmp_path)
    nudge("r-1", tmp_path)
    nudge("../escape", tmp_path)
    nudge("", tmp_path)
    assert take_nudges(tmp_path) == ["r-1"]
    assert take_nudges(tmp_path) == []
    assert not (tmp_path.parent / "escape").exists()


def test_the_loop_looks_at_a_nudged_run_at_once(tmp_path: Path) -> None:
    r = rig(tmp_path)
    ctx = Context(
        store=r.store,
        providers=r.ctx.providers,
        clock=r.clock,
        settings=Settings(poll_interval_s=600.0),
        client_factory=r.ctx.client_factory,
        home=tmp_path / "home",
    )
    controller = Controller(ctx)
    controller._read_runs()
    [slot] = controller.schedule.take_due()
    controller.schedule.done(slot.run_id, Result("RUNNING"))  # a quiet look: the next later
    assert controller.schedule.take_due() == []
    nudge(r.run_id, ctx.home)
    controller._read_runs()
    assert [slot.run_id for slot in controller.schedule.take_due()] == [r.run_id]


def test_a_wake_up_never_kills_a_controller_that_is_starting(tmp_path: Path) -> None:
    """SIGUSR1 is ignored from the moment the controller holds its lock (its pid is known
    only then) until its loop handles it."""
    env = dict(os.environ, CORRAL_HOME=str(tmp_path / "home"), CORRAL_PROVIDERS="local")
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral.control", "--idle-exit", "5"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pid_file = tmp_path / "home" / "controller.pid"
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for _ in range(20):  # wake-ups all through its start
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(0.02)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
