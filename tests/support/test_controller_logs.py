"""A failed test's report carries the end of every controller log of the test
(``support.controller_logs``, the report hook of ``tests/conftest.py``): the background
controller's and those of the ``start_controller()`` helpers, on the test's home or another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import controller_logs

#: the test that fails on purpose, run by the last test here (not collected by the suite: its
#: name is no test module's)
_INNER = Path(__file__).with_name("failing_after_a_controller.py")


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


def test_a_failed_test_s_report_shows_the_log_of_a_controller_it_started_on_another_home(
    tmp_path: Path,
) -> None:
    here = Path(__file__)
    env = dict(os.environ)
    env.pop("CORRAL_HOME", None)
    inner = str(_INNER)
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
