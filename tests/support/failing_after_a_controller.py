"""A test that fails on purpose after starting a controller on a home of its own: run alone
by ``test_controller_logs.py``, whose test reads its report (pytest collects a file named on
its command line whatever the name; the suite does not collect this one)."""

from __future__ import annotations

from pathlib import Path

from support.controllers import start_controller, stop
from support.waiting import wait_until


def test_inner_a_test_that_fails_after_starting_a_controller_elsewhere(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    proc = start_controller(home, {"CORRAL_CONTROLLER_IDLE_EXIT": "30"})
    log = home / "controller-test.log"
    wait_until(lambda: "started for" in log.read_text(), 30, 0.1, "the controller's first line")
    stop(proc)
    raise AssertionError("failing on purpose")
