"""Spending caps in the store: who launched each run, the caps themselves, and the billed
spans a cap counts (on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from storekit import make_run

from corral.errors import NotFound
from corral.store import Store

NOV = datetime(2026, 11, 1, tzinfo=UTC)


def _attempt(store: Store, run_id: str, price: float, started: datetime, ended: datetime | None):
    store.create_attempt(
        run_id, 1, provider="fake", offer={}, price_per_hour=price, started_at=started
    )
    if ended is not None:
        store.update_attempt(run_id, 1, billed_until=ended)


def test_a_run_keeps_who_launched_it_and_its_project(store: Store) -> None:
    run = make_run(store, owner="alice", project="llm")
    assert store.run_owner(run.id) == ("alice", "llm")
    assert store.run_owner(make_run(store).id) == (None, None)


def test_caps_are_set_replaced_listed_and_removed(store: Store) -> None:
    store.set_cap("team", "", amount_usd=500, warn_at=0.9, period="month", set_by="alice")
    store.set_cap("user", "bob", amount_usd=50, warn_at=0.8, period="total")
    store.set_cap("user", "bob", amount_usd=60, warn_at=0.7, period="month", set_by="carol")
    caps = {(c.scope, c.subject): c for c in store.caps()}
    assert set(caps) == {("team", ""), ("user", "bob")}
    bob = caps[("user", "bob")]
    assert (bob.amount_usd, bob.warn_at, bob.period, bob.set_by) == (60, 0.7, "month", "carol")
    assert store.remove_cap("user", "bob").amount_usd == 60
    with pytest.raises(NotFound, match="no spending cap for user 'bob'"):
        store.remove_cap("user", "bob")


def test_a_cap_counts_the_paid_attempts_of_its_runs_that_billed_in_its_period(
    store: Store,
) -> None:
    mine = make_run(store, "a", owner="bob", project="llm")
    other = make_run(store, "b", owner="alice", project="llm")
    old = make_run(store, "c", owner="bob")
    free = make_run(store, "d", owner="bob")
    _attempt(store, mine.id, 2.0, datetime(2026, 11, 3, tzinfo=UTC), None)
    _attempt(store, other.id, 1.0, datetime(2026, 11, 4, tzinfo=UTC), None)
    # ended in October: not this month's
    _attempt(
        store, old.id, 5.0, datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC)
    )
    _attempt(store, free.id, 0.0, datetime(2026, 11, 5, tzinfo=UTC), None)
    assert [s.run_id for s in store.cap_spans("user", "bob", NOV)] == [mine.id]
    assert [s.run_id for s in store.cap_spans("user", "bob", None)] == [old.id, mine.id]
    assert [s.run_id for s in store.cap_spans("project", "llm", NOV)] == [mine.id, other.id]
    assert {s.run_id for s in store.cap_spans("team", "", None)} == {mine.id, other.id, old.id}
    [span] = store.cap_spans("user", "bob", NOV)
    assert (span.price_per_hour, span.billed_until, span.run_attempt) == (2.0, None, 0)
