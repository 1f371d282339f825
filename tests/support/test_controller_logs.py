"""A failed test's report carries the end of every controller log of the test
(``support.controller_logs``, the report hook of ``tests/conftest.py``): the background
controller's and those of the ``start_controller()`` helpers, on the test's home or another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import controller_logs
from support.controllers import start_controller, stop
from support.waiting import wait_until

#: set for the run of the test below that must fail
_INNER = "CORRAL_TEST_CONTROLLER_LOGS_INNER"


def test_the_logs_of_a_test_are_its_home_s_and_the_helpers_last_lines_each(
    corral_home: Path, tmp_path: Path
) -> None:
    (corral_home / "controller.log").write_text("".join(f"bg {i}\n" for i in range(100)))
    other = tmp_path / "other" / "controller-test.log"
    other.parent.mkdir()
    other.write_text("helper 1\nhelper 2\n")
    controller_logs.started(other)
    controller_logs.started(other)  # named once
    controller_logs.started(tmp_path / "never-written.log")
    got = dict(controller_logs.sections(corral_home, tail=3))
    assert got == {
        f"{corral_home / 'controller.log'} (last 3 lines)": "bg 97\nbg 98\nbg 99",
        f"{other} (last 3 lines)": "helper 1\nhelper 2",
    }
    controller_logs.clear()
    assert controller_logs.logs(None) == []


@pytest.mark.skipif(not os.environ.get(_INNER), reason="run by the test below, to fail")
def test_inner_a_test_that_fails_after_starting_a_controller_elsewhere(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    proc = start_controller(home, {"CORRAL_CONTROLLER_IDLE_EXIT": "30"})
    log = home / "controller-test.log"
    wait_until(lambda: "started for" in log.read_text(), 30, 0.1, "the controller's first line")
    stop(proc)
    raise AssertionError("failing on purpose")


def test_a_failed_test_s_report_shows_the_log_of_a_controller_it_started_on_another_home(
    tmp_path: Path,
) -> None:
    here = Path(__file__)
    env = {**os.environ, _INNER: "1"}
    env.pop("CORRAL_HOME", None)
    inner = f"{here}::test_inner_a_test_that_fails_after_starting_a_controller_elsewhere"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    out = subprocess.run(
        [*argv, f"--basetemp={tmp_path / 'inner'}", inner],
        cwd=here.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    text = out.stdout
    assert "failing on purpose" in text, text
    assert "elsewhere/controller-test.log (last 80 lines)" in text, text
    assert "corral: controller " in text and " started for " in text, text
