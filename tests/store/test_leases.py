"""Leases on runs and on the event feed (SQLite and PostgreSQL): one holder at a time, taken
over when it expires, renewed without a write on every look."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from storekit import FakeClock, make_run

from corral.store import Store
from corral.store.db import Tx
from support.leases import says_it_lives


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


def test_many_runs_are_taken_and_renewed_in_few_statements(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,200 runs (more than the 999 parameters older SQLite builds allow in a statement,
    and far from the 32,766 of newer ones at 10,000 runs): taken and renewed by one UPDATE,
    however many, with no list of ids."""
    ids = {make_run(store).id for _ in range(1200)}
    statements: list[str] = []
    real_tuples, real_all, real_run = Tx.tuples, Tx.all, Tx.run

    def counted(real):  # type: ignore[no-untyped-def]
        def call(self, sql, params=None):  # type: ignore[no-untyped-def]
            statements.append(sql)
            return real(self, sql, params)

        return call

    monkeypatch.setattr(Tx, "tuples", counted(real_tuples))
    monkeypatch.setattr(Tx, "all", counted(real_all))
    monkeypatch.setattr(Tx, "run", counted(real_run))
    assert store.lease_runs("ctl-a", 10) == ids
    # the look (controllers, how many runs are active, its runs and the free ones), and this
    # controller's presence and one UPDATE taking all 1,200
    assert len(statements) == 5
    assert all(len(params_of(s)) < 40 for s in statements)
    statements.clear()
    clock.advance(3)
    assert store.lease_runs("ctl-a", 10) == ids
    assert len(statements) == 3  # fresh: looked at, nothing written
    statements.clear()
    clock.advance(3)  # past half: every lease renewed by one statement
    assert store.lease_runs("ctl-a", 10) == ids
    assert len(statements) == 5
    renewed = {store.get_run(rid).lease_expires_at for rid in list(ids)[:50]}
    assert renewed == {clock.now + timedelta(seconds=10)}
    assert store.lease_runs("ctl-b", 10) == set()  # held by A: nothing for B


def params_of(sql: str) -> set[str]:
    return set(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", sql))


def test_controllers_share_the_runs_and_a_newcomer_gets_its_part(
    store: Store, clock: FakeClock
) -> None:
    """A controller takes at most its share of the active runs (over the live controllers,
    rounded up); one that joins later gets the newest RUNNING runs the first one gives up,
    once a look already under way there has ended; one that dies leaves them all to the
    others."""
    runs = []
    for _ in range(10):
        runs.append(make_run(store).id)
        clock.advance(0.01)
    for rid in runs[:8]:
        store.transition(rid, "PROVISIONING", "test")
        store.transition(rid, "RUNNING", "test", provider="cloud" if rid != runs[6] else "here")
    assert store.lease_runs("ctl-a", 20) == set(runs)  # alone: every run
    assert store.lease_runs("ctl-b", 20) == set()  # B is counted from now on; nothing free
    clock.advance(1)
    # over its share (5): A gives up its newest RUNNING runs whose machines B sees too (not
    # the waiting ones, not the one on "here")
    assert store.lease_runs("ctl-a", 20) == set(runs)  # none movable: none given up
    kept = {*runs[:2], runs[6], *runs[8:]}
    moved = set(runs) - kept
    assert store.lease_runs("ctl-a", 20, movable={"cloud"}) == kept
    assert store.get_run(runs[7]).lease_owner is None
    assert store.lease_runs("ctl-b", 20) == set()  # free after a quarter of a lease
    clock.advance(5)
    assert store.lease_runs("ctl-b", 20) == moved
    assert store.lease_runs("ctl-a", 20, movable={"cloud"}) == kept  # nothing moves again
    c = make_run(store).id  # a new run: the first to look (under its share of 6) takes it
    assert store.lease_runs("ctl-a", 20) == {*kept, c}
    assert store.lease_runs("ctl-b", 20) == moved
    clock.advance(21)  # B died: its presence and leases expired, A takes every run
    assert store.lease_runs("ctl-a", 20) == {*runs, c}
    store.release_runs("ctl-a")  # a clean stop: not counted any more
    assert store.lease_runs("ctl-c", 20) == {*runs, c}


def test_runs_nobody_takes_for_a_lease_are_taken_past_the_share(
    store: Store, clock: FakeClock
) -> None:
    """B says it lives but never takes its share: A takes B's share once those runs have
    been free for a lease (within two leases), and keeps them: it gives none up to a
    controller that takes nothing (they would only be stranded again)."""
    runs = []
    for _ in range(6):
        runs.append(make_run(store).id)
        clock.advance(0.01)
    says_it_lives(store, "ctl-b", 20)
    assert store.lease_runs("ctl-a", 20) == set(runs[:3])  # its share: 6 over 2
    waited = 0.0
    while store.lease_runs("ctl-a", 20) != set(runs):
        clock.advance(5)  # A asks every quarter of a lease; B renews its presence
        waited += 5
        says_it_lives(store, "ctl-b", 20)
        assert waited <= 2 * 20, "B's share is still free"
    assert waited >= 20 - 5  # not before the runs were free for about a lease
    # the runs run on a shared provider: over its share, A would give the newest up, but
    # not to B, which takes nothing
    for rid in runs:
        store.transition(rid, "PROVISIONING", "test")
        store.transition(rid, "RUNNING", "test", provider="cloud")
    for _ in range(12):
        clock.advance(5)
        says_it_lives(store, "ctl-b", 20)
        assert store.lease_runs("ctl-a", 20, movable={"cloud"}) == set(runs)
    # a controller that takes runs (C joins) gets its share given up to it
    assert store.lease_runs("ctl-c", 20) == set()
    clock.advance(1)
    kept = store.lease_runs("ctl-a", 20, movable={"cloud"})
    assert kept == set(runs[:2])  # 6 over A, B and C
    clock.advance(5)
    assert store.lease_runs("ctl-c", 20) == set(runs[2:4])  # C's share, the oldest first
    clock.advance(21)  # A and C died: D takes its share at once (B counts while it lives)
    says_it_lives(store, "ctl-b", 20)
    assert len(store.lease_runs("ctl-d", 20)) == 3
    for _ in range(6):  # and B's, once free for a lease
        clock.advance(5)
        says_it_lives(store, "ctl-b", 20)
        if store.lease_runs("ctl-d", 20) == set(runs):
            break
    assert store.lease_runs("ctl-d", 20) == set(runs)


def test_a_gone_controllers_runs_are_made_free_and_it_is_forgotten(
    store: Store, clock: FakeClock
) -> None:
    """The first controller to see another gone (its presence expired) makes the runs it
    held free, so the others find them among the free ones (their per-tick read), and
    deletes its row once none names it."""
    runs = []
    for _ in range(4):
        runs.append(make_run(store).id)
        clock.advance(0.01)
    assert store.lease_runs("ctl-a", 10) == set(runs)
    assert store.lease_runs("ctl-b", 10) == set()  # B lives: share 2, nothing free
    assert store.lease_runs("ctl-c", 10) == set()  # C lives too
    assert {h[0] for h in store.run_heads("ctl-b")} == set()  # A's runs are not B's to read
    clock.advance(11)  # A died; B and C live on
    says_it_lives(store, "ctl-b", 10)
    says_it_lives(store, "ctl-c", 10)
    # B's share is 2 of 4 (three live: B, C and A gone): it takes 2, the rest made free
    taken = store.lease_runs("ctl-b", 10)
    assert len(taken) == 2
    free = set(runs) - taken
    assert {h[0] for h in store.run_heads("ctl-c")} == free  # found by C's per-tick read
    assert {store.get_run(r).lease_owner for r in free} == {None}
    with store._db.transaction() as tx:
        owners = {o for (o,) in tx.tuples("SELECT owner FROM controllers")}
    assert owners == {"ctl-b", "ctl-c"}
    assert store.lease_runs("ctl-c", 10) == free


def test_the_loops_read_is_the_runs_held_and_the_free_ones(store: Store, clock: FakeClock) -> None:
    """``run_heads(owner)``: the runs the owner holds and those nobody holds, oldest first;
    none another controller holds."""
    runs = []
    for _ in range(6):
        runs.append(make_run(store).id)
        clock.advance(0.01)
    assert store.lease_runs("ctl-a", 20) == set(runs)
    assert store.lease_runs("ctl-b", 20) == set()
    store.release_runs("ctl-a")
    store.lease_runs("ctl-a", 20)  # A back: its share, 3 (B lives)
    assert store.lease_runs("ctl-b", 20) == set(runs[3:])
    late = make_run(store).id  # nobody's yet
    store.transition(runs[4], "CANCELLED", "user")
    assert [h[0] for h in store.run_heads("ctl-a")] == [*runs[:3], late]
    assert [h[0] for h in store.run_heads("ctl-b")] == [runs[3], runs[5], late]
    assert [h[0] for h in store.run_heads()] == [*runs[:4], runs[5], late]
