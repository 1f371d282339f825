"""The controller through the service: status, start, stop, a foreground run, bad input."""

from __future__ import annotations

import threading

import pytest

from corral import paths
from corral.errors import BadInput, Conflict
from corral.service.controller import (
    controller_status,
    run_controller,
    start_controller,
    stop_controller,
)


def test_start_status_and_stop_of_the_background_controller() -> None:
    idle = controller_status()
    assert (idle.running, idle.pid, idle.home) == (False, None, str(paths.home()))
    assert idle.to_json() == {"running": False, "pid": None, "home": str(paths.home())}
    started = start_controller()
    try:
        assert started.to_json() == {"running": True, "pid": started.pid}
        assert controller_status().pid == started.pid
        assert start_controller().pid == started.pid  # one runs: woken, not started again
        with pytest.raises(Conflict, match="a controller already runs"):
            run_controller(idle_exit_s=0.1)
    finally:
        stopped = stop_controller()
    assert stopped.to_json() == {"stopped": True, "pid": started.pid}
    assert controller_status().running is False
    assert stop_controller().to_json() == {"stopped": False, "pid": None}


def test_a_foreground_controller_exits_when_idle_with_status_zero() -> None:
    result: list[int] = []
    # off the main thread: the controller then leaves this process's signal handlers alone
    worker = threading.Thread(
        target=lambda: result.append(run_controller(idle_exit_s=0.05, tick_s=0.02))
    )
    worker.start()
    worker.join(timeout=30)
    assert result == [0]
    assert controller_status().running is False


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: start_controller(wait_s=0), r"wait 0: expected a number of seconds above 0"),
        (lambda: stop_controller(timeout_s=-1), r"timeout -1: expected a number of seconds"),
    ],
    ids=["start", "stop"],
)
def test_waits_that_are_not_above_zero_are_bad_input(call, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        call()
