"""Leases on runs and on the event feed (SQLite and PostgreSQL): one holder at a time, taken
over when it expires, renewed without a write on every look."""

from __future__ import annotations

from datetime import timedelta

from storekit import FakeClock, make_run

from corral.store import Store


def test_run_leases_one_holder_expiry_and_takeover(store: Store, clock: FakeClock) -> None:
    a, b = make_run(store), make_run(store)
    assert store.lease_runs("ctl-a", 10) == {a.id, b.id}
    assert store.lease_runs("ctl-b", 10) == set()  # held by A
    assert store.holds_run(a.id, "ctl-a") and not store.holds_run(a.id, "ctl-b")
    clock.advance(4)
    assert store.lease_runs("ctl-a", 10) == {a.id, b.id}  # still fresh: no write
    assert store.get_run(a.id).lease_expires_at == clock.now + timedelta(seconds=6)
    clock.advance(2)  # past half: renewed
    assert store.lease_runs("ctl-a", 10) == {a.id, b.id}
    assert store.get_run(a.id).lease_expires_at == clock.now + timedelta(seconds=10)
    clock.advance(11)  # A died: its leases expired, B takes the runs over
    assert store.lease_runs("ctl-b", 10) == {a.id, b.id}
    assert store.lease_runs("ctl-a", 10) == set() and not store.holds_run(a.id, "ctl-a")
    store.transition(a.id, "CANCELLED", "user")  # a run that ended is nobody's business
    assert store.lease_runs("ctl-b", 10) == {b.id}
    assert store.release_runs("ctl-b") == 2
    c = make_run(store)
    assert store.lease_runs("ctl-a", 10) == {b.id, c.id}  # released: taken at once


def test_the_feed_has_one_consumer_at_a_time(store: Store, clock: FakeClock) -> None:
    assert store.lease_consumer("webhooks", "ctl-a", 10)
    assert not store.lease_consumer("webhooks", "ctl-b", 10)
    clock.advance(3)
    assert store.lease_consumer("webhooks", "ctl-a", 10)  # fresh: kept without a write
    clock.advance(11)
    assert store.lease_consumer("webhooks", "ctl-b", 10)  # A went quiet: B takes over
    assert not store.lease_consumer("webhooks", "ctl-a", 10)
    store.release_consumer("webhooks", "ctl-b")
    assert store.lease_consumer("webhooks", "ctl-a", 10)
    assert store.event_position("webhooks") == 0  # the position is untouched by the lease
