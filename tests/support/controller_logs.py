"""The logs of the controllers a test ran, for the report of a test that fails.

``tests/conftest.py`` adds the end of each log to a failed test's report, so that a flake
under load (a run that never moved) is read from the controllers' own account, not guessed at
after the temporary homes are gone. The logs are: the background controller's
(``CORRAL_HOME/controller.log``, started by a CLI or a service call), the test home's
``controller-test.log`` (where tests that start ``python -m corral.control`` themselves write
its output), and every log a ``start_controller()`` helper named with :func:`started` (those
helpers may start controllers on homes of their own: several controllers on one store).
"""

from __future__ import annotations

from pathlib import Path

#: the lines of each log a report carries (its end)
TAIL_LINES = 80

#: the logs named by the controllers this test started (cleared after each test)
_started: list[Path] = []


def started(log: Path) -> None:
    """A controller started by this test writes ``log``."""
    if log not in _started:
        _started.append(log)


def clear() -> None:
    """The test is over: its controllers are not the next one's."""
    _started.clear()


def logs(home: Path | None) -> list[Path]:
    """The controller logs of this test that exist: ``home``'s own, then the helpers'."""
    found = [home / "controller.log", home / "controller-test.log"] if home else []
    found += [p for p in _started if p not in found]
    return [p for p in found if p.is_file()]


def sections(home: Path | None, tail: int = TAIL_LINES) -> list[tuple[str, str]]:
    """``(title, text)`` of each log's last ``tail`` lines, as report sections."""
    out = []
    for log in logs(home):
        try:
            lines = log.read_text(errors="replace").splitlines()[-tail:]
        except OSError as e:
            lines = [f"(unreadable: {e})"]
        out.append((f"{log} (last {tail} lines)", "\n".join(lines)))
    return out
