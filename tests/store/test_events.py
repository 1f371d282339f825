from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from storekit import FakeClock, make_run

from corral.errors import NotFound
from corral.store import Store


def test_events_come_back_after_id_in_ascending_order(store: Store, clock: FakeClock):
    a = make_run(store, "a")
    b = make_run(store, "b")
    clock.advance(1)
    e1 = store.add_event(a.id, "stage.started", data={"stage": "train"}, attempt=1)
    e2 = store.add_event(b.id, "progress", data={"step": 10, "pct": 12.5})
    e3 = store.add_event(a.id, "checkpoint.saved", "step 100", data={"step": 100}, attempt=1)

    all_events = store.events()
    assert [e.id for e in all_events] == sorted(e.id for e in all_events)
    assert [e.id for e in store.events(after_id=e1.id)] == [e2.id, e3.id]
    assert [e.id for e in store.events(a.id, after_id=e1.id)] == [e3.id]
    assert [e.type for e in store.events(a.id, after_id=0, limit=2)] == [
        "run.state",
        "stage.started",
    ]
    assert [e.id for e in store.events(types=["progress", "checkpoint.saved"])] == [e2.id, e3.id]
    assert store.events(types=[]) == []
    got = store.events(a.id, after_id=e1.id)[0]
    assert got == e3
    assert (got.reason, got.data, got.attempt, got.ts) == ("step 100", {"step": 100}, 1, clock.now)


def test_add_event_for_an_unknown_run_is_not_found(store: Store):
    with pytest.raises(NotFound):
        store.add_event("ghost-000000", "progress")


def test_polling_with_after_id_sees_every_event_of_concurrent_writers(store: Store):
    run = make_run(store)
    writers, per_writer = 4, 15
    start = store.events()[-1].id
    done = threading.Event()
    seen: list[int] = []

    def write(i: int) -> None:
        for j in range(per_writer):
            store.add_event(run.id, "progress", data={"writer": i, "n": j})

    def poll() -> None:
        cursor = start
        while True:
            finished = done.is_set()
            for event in store.events(run.id, after_id=cursor):
                seen.append(event.id)
                cursor = event.id
            if finished:
                return

    poller = threading.Thread(target=poll)
    poller.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    poller.join()

    written = [e.id for e in store.events(run.id, after_id=start)]
    assert len(written) == writers * per_writer
    assert seen == written  # nothing skipped, nothing twice, in order


def test_agent_events_are_copied_once_with_the_cursor(store: Store, clock: FakeClock):
    run = make_run(store)
    store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)
    agent_ts = clock.now - timedelta(seconds=30)
    batch = [
        {"type": "stage.started", "data": {"stage": "train"}, "ts": agent_ts},
        {"type": "progress", "reason": "", "data": {"step": 5}},
    ]

    copied = store.append_agent_events(run.id, 1, batch, cursor=2)
    again = store.append_agent_events(run.id, 1, batch, cursor=2)

    assert [e.type for e in copied] == ["stage.started", "progress"]
    assert copied[0].ts == agent_ts and copied[1].ts == clock.now
    assert again == []
    assert store.get_attempt(run.id, 1).events_cursor == 2
    assert [e.type for e in store.events(run.id)] == ["run.state", "stage.started", "progress"]
    assert all(e.attempt == 1 for e in copied)
