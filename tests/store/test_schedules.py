"""Schedules in the store: registering, replacing, removing, and a tick acted on once however
many controllers race for it (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from storekit import FakeClock

from corral.errors import Conflict, NotFound
from corral.store import Store

T0 = datetime(2026, 1, 2, 2, 0, tzinfo=UTC)


def _add(store: Store, name: str = "nightly", **kw: object) -> None:
    store.add_schedule(
        name=name,
        cron="0 2 * * *",
        timezone="UTC",
        missed="skip",
        spec={"name": "train", "run": "python train.py"},
        spec_hash="h1",
        spec_path="/jobs/train.yaml",
        workdir="/jobs",
        next_at=T0,
        **kw,  # type: ignore[arg-type]
    )


def test_add_list_replace_remove(store: Store) -> None:
    _add(store)
    with pytest.raises(Conflict, match="--replace"):
        _add(store)
    store.add_schedule(
        name="nightly",
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        missed="run-once",
        spec={"name": "train", "run": "python train2.py"},
        spec_hash="h2",
        spec_path="/jobs/train.yaml",
        workdir="/jobs",
        next_at=T0 + timedelta(hours=1),
        replace=True,
    )
    [s] = store.schedules()
    assert (s.cron, s.timezone, s.missed, s.spec_hash, s.next_at) == (
        "0 3 * * *",
        "Europe/Berlin",
        "run-once",
        "h2",
        T0 + timedelta(hours=1),
    )
    assert store.count_schedules() == 1
    assert store.due_schedules(T0) == [] and store.due_schedules(T0 + timedelta(hours=2))
    store.remove_schedule("nightly")
    with pytest.raises(NotFound, match="schedule ls"):
        store.remove_schedule("nightly")


def test_a_tick_starts_its_run_and_moves_next_at(store: Store, clock: FakeClock) -> None:
    _add(store)
    tick = store.fire_schedule(
        "nightly",
        expect_next=T0,
        next_at=T0 + timedelta(days=1),
        tick_at=T0,
        start_run=True,
        missed=0,
    )
    assert tick is not None and tick.run_id
    run = store.get_run(tick.run_id)
    assert run.state == "PENDING" and run.name == "train" and run.spec_hash == "h1"
    assert [e.type for e in store.events(run.id)] == ["run.state", "schedule.fired"]
    s = store.get_schedule("nightly")
    assert (s.next_at, s.last_run_id, s.fired, s.skipped) == (
        T0 + timedelta(days=1),
        run.id,
        1,
        0,
    )
    # a second controller with the same view of the schedule does nothing
    again = store.fire_schedule(
        "nightly",
        expect_next=T0,
        next_at=T0 + timedelta(days=1),
        tick_at=T0,
        start_run=True,
        missed=0,
    )
    assert again is None and len(store.list_runs()) == 1
    # a skipped tick is recorded without a run
    skipped = store.fire_schedule(
        "nightly",
        expect_next=T0 + timedelta(days=1),
        next_at=T0 + timedelta(days=5),
        tick_at=T0 + timedelta(days=4),
        start_run=False,
        missed=2,
    )
    assert skipped is not None and skipped.run_id is None
    assert store.get_schedule("nightly").skipped == 3
    assert [t.run_id for t in store.schedule_ticks("nightly")] == [run.id, None]


def test_controllers_racing_for_a_tick_start_one_run(db_url: str) -> None:
    stores = [Store.open(db_url) for _ in range(4)]
    try:
        _add(stores[0])
        results: list[object] = []
        barrier = threading.Barrier(len(stores))

        def fire(s: Store) -> None:
            barrier.wait()
            results.append(
                s.fire_schedule(
                    "nightly",
                    expect_next=T0,
                    next_at=T0 + timedelta(days=1),
                    tick_at=T0,
                    start_run=True,
                    missed=0,
                )
            )

        threads = [threading.Thread(target=fire, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sum(r is not None for r in results) == 1
        assert len(stores[0].list_runs()) == 1
    finally:
        for s in stores:
            s.close()
