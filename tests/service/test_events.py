"""A run's events after a cursor, filtered by type."""

from __future__ import annotations

import pytest

from corral.errors import BadInput, NotFound
from corral.service.events import run_events
from corral.store import Store

from .helpers import record_run


def test_events_page_by_cursor_and_filter_by_type() -> None:
    store = Store.open()
    run_id = record_run(store)
    other = record_run(store, name="other")
    store.add_event(run_id, "stage.started", "train", data={"stage": "train"})
    store.add_event(other, "stage.started", "not this run's")
    store.add_event(run_id, "stage.finished", "train", data={"exit_code": 0})
    first = run_events(run_id, limit=2)
    assert [e.type for e in first.events] == ["run.state", "stage.started"]
    assert first.events[0].data == {"from": None, "to": "PENDING"}
    rest = run_events(run_id, after=first.cursor)
    assert [e.type for e in rest.events] == ["stage.finished"]
    done = run_events(run_id, after=rest.cursor)
    assert (done.events, done.cursor) == ([], rest.cursor)
    only = run_events(run_id, types=["stage.finished", "stage.started"])
    assert [e.reason for e in only.events] == ["train", "train"]
    assert run_events(run_id, types=[]).events == []
    assert only.to_json()["events"][0]["ts"].endswith("+00:00")


def test_bad_cursor_limit_type_or_run_are_one_line_errors() -> None:
    run_id = record_run(Store.open())
    with pytest.raises(BadInput, match="after must be an event id >= 0, not -1"):
        run_events(run_id, after=-1)
    with pytest.raises(BadInput, match="limit must be between 1 and 1000, not 0"):
        run_events(run_id, limit=0)
    with pytest.raises(BadInput, match=r"event type ' run\.state'"):
        run_events(run_id, types=[" run.state"])
    with pytest.raises(NotFound, match="'missing'"):
        run_events("missing")
