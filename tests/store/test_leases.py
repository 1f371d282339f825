"""Leases on runs and on the event feed (SQLite and PostgreSQL): one holder at a time, taken
over when it expires, renewed without a write on every look."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from storekit import FakeClock, make_run

from corral.store import Store
from corral.store.db import Tx


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
    # the look (runs, controllers), and this controller's presence and one UPDATE taking
    # all 1,200
    assert len(statements) == 4
    assert all(len(params_of(s)) < 40 for s in statements)
    statements.clear()
    clock.advance(3)
    assert store.lease_runs("ctl-a", 10) == ids
    assert len(statements) == 2  # fresh: looked at, nothing written
    statements.clear()
    clock.advance(3)  # past half: every lease renewed by one statement
    assert store.lease_runs("ctl-a", 10) == ids
    assert len(statements) == 4
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
