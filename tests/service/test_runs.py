"""Listing runs, one run in detail, stop/cancel requests and waiting, through the service."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from control.helpers import wait_for, write_spec
from corral.errors import BadInput, Conflict, NotFound
from corral.service.actions import cancel_run, request, stop_run, wait_for_end
from corral.service.details import get_run
from corral.service.logs import open_logs
from corral.service.runs import list_runs
from corral.service.submit import submit_run
from corral.store import Store

from .helpers import record_run


def test_list_filters_by_state_any_case_newest_first_with_paging() -> None:
    store = Store.open()
    ids = [record_run(store, name=f"r{i}") for i in range(3)]
    store.transition(ids[0], "CANCELLED", "user")
    assert [r.id for r in list_runs()] == ids[::-1]
    assert [r.id for r in list_runs(active_only=True)] == [ids[2], ids[1]]
    assert [r.id for r in list_runs(states=["cancelled"])] == [ids[0]]
    assert [r.id for r in list_runs(limit=1, offset=1)] == [ids[1]]
    assert list_runs(limit=0) == []


def test_a_bad_state_limit_or_offset_is_bad_input_naming_it() -> None:
    with pytest.raises(BadInput, match=r"state 'RUNING': expected one of .*RUNNING"):
        list_runs(states=["runing"])
    with pytest.raises(BadInput, match="limit must be a whole number >= 0, not -1"):
        list_runs(limit=-1)
    with pytest.raises(BadInput, match="offset must be"):
        list_runs(offset=-2)


def test_get_run_defaults_to_the_newest_and_names_what_is_missing() -> None:
    with pytest.raises(NotFound, match="no runs yet"):
        get_run()
    store = Store.open()
    record_run(store, name="older")
    newest = record_run(store, name="newer")
    run = get_run()
    assert (run.id, run.attempts, run.stages, run.acceptance) == (newest, [], [], None)
    assert run.logs_dir.endswith(f"runs/{newest}/logs")
    assert get_run("older").name == "older"
    with pytest.raises(NotFound, match="no run matches 'zzz'"):
        get_run("zzz")


def test_requests_refuse_an_unknown_action_and_a_finished_run() -> None:
    store = Store.open()
    run_id = record_run(store)
    with pytest.raises(BadInput, match="action 'pause': expected one of cancel, stop"):
        request(run_id, "pause")
    store.transition(run_id, "FAILED", "broken")
    with pytest.raises(Conflict, match="already ended \\(FAILED\\): nothing to stop"):
        stop_run(run_id)


def test_waiting_gives_up_after_the_timeout_with_the_run_as_it_is() -> None:
    run_id = record_run(Store.open())
    assert wait_for_end(run_id, timeout_s=0.1, poll_s=0.05).state == "PENDING"
    with pytest.raises(BadInput, match="timeout must be >= 0"):
        wait_for_end(run_id, timeout_s=-1)


SLEEPER = """
    name: sleeper
    run: trap 'echo got-term; exit 0' TERM; echo up; sleep 30 & wait
"""


def _running(tmp_path: Path) -> str:
    run_id = submit_run(write_spec(tmp_path, SLEEPER)).run.id
    wait_for(Store.open(), run_id, {"RUNNING"}, timeout=30)
    return run_id


@pytest.mark.slow
def test_cancel_ends_a_running_run_cancelled_and_a_second_cancel_conflicts(
    tmp_path: Path,
) -> None:
    run_id = _running(tmp_path)
    run = cancel_run(run_id, wait=True, timeout_s=60)
    assert run.state == "CANCELLED" and run.terminal
    with pytest.raises(Conflict, match="CANCELLED"):
        cancel_run(run_id)


@pytest.mark.slow
def test_stop_is_graceful_and_ends_stopped_by_the_user(tmp_path: Path) -> None:
    run_id = _running(tmp_path)
    tailer = open_logs(run_id)
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while "up" not in seen:  # the stage runs and its trap is set
        assert time.monotonic() < deadline, seen
        seen += [ln.text for ln in tailer.read()]
        time.sleep(0.05)
    asked = stop_run(run_id)
    assert asked.requested_action == "stop"
    run = wait_for_end(run_id, timeout_s=60)
    assert (run.state, run.reason) == ("STOPPED", "user")
    seen += [ln.text for ln in tailer.read()]
    assert "got-term" in seen
