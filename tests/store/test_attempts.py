from __future__ import annotations

from datetime import timedelta

import pytest
from storekit import FakeClock, make_run

from corral.errors import Conflict, NotFound, StoreError
from corral.store import Store

OFFER = {"provider": "runpod", "offer_id": "L40S-1", "region": "EU", "price_per_hour": 0.86}


def test_create_and_read_attempts(store: Store, clock: FakeClock):
    run = make_run(store)
    first = store.create_attempt(run.id, 1, provider="runpod", offer=OFFER, price_per_hour=0.86)
    clock.advance(600)
    second = store.create_attempt(
        run.id, 2, provider="runpod", offer=OFFER, price_per_hour=0.9, data={"why": "preempted"}
    )

    assert (first.number, first.state, first.started_at) == (
        1,
        "PROVISIONING",
        second.started_at - timedelta(seconds=600),
    )
    assert first.offer == OFFER and first.log_offsets == {} and first.events_cursor == 0
    assert (first.cost_usd, first.billed_until, first.instance_id) == (0.0, None, None)
    assert second.data == {"why": "preempted"}
    assert store.get_attempt(run.id, 2) == second
    assert [a.number for a in store.attempts(run.id)] == [1, 2]
    assert store.attempts("nope-000000") == []


def test_attempt_numbers_are_unique_per_run(store: Store):
    run = make_run(store)
    other = make_run(store, "other")
    store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)
    store.create_attempt(other.id, 1, provider="local", offer={}, price_per_hour=0.0)
    with pytest.raises(Conflict):
        store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)


def test_attempt_for_unknown_run_or_number_is_not_found(store: Store):
    with pytest.raises(NotFound):
        store.create_attempt("nope-000000", 1, provider="local", offer={}, price_per_hour=0.0)
    run = make_run(store)
    with pytest.raises(NotFound):
        store.get_attempt(run.id, 7)
    with pytest.raises(NotFound):
        store.update_attempt(run.id, 7, state="RUNNING")


def test_update_attempt_sets_columns(store: Store, clock: FakeClock):
    run = make_run(store)
    store.create_attempt(run.id, 1, provider="local", offer={}, price_per_hour=0.0)
    running_at = clock.advance(12)
    got = store.update_attempt(
        run.id,
        1,
        state="RUNNING",
        instance_id="i-123",
        endpoint="http://127.0.0.1:8765",
        running_at=running_at,
        log_offsets={"train": 4096},
        events_cursor=17,
    )
    assert (got.state, got.instance_id, got.endpoint) == (
        "RUNNING",
        "i-123",
        "http://127.0.0.1:8765",
    )
    assert (got.running_at, got.log_offsets, got.events_cursor) == (running_at, {"train": 4096}, 17)
    with pytest.raises(StoreError):
        store.update_attempt(run.id, 1, id=99)


def test_billed_until_prices_the_attempt_and_the_run_sums_attempts(store: Store, clock: FakeClock):
    run = make_run(store)
    a1 = store.create_attempt(run.id, 1, provider="aws", offer={}, price_per_hour=2.0)
    ended = a1.started_at + timedelta(minutes=90)
    a1 = store.update_attempt(
        run.id, 1, billed_until=ended, ended_at=ended, exit_reason="preempted"
    )
    clock.now = ended + timedelta(minutes=5)
    a2 = store.create_attempt(run.id, 2, provider="aws", offer={}, price_per_hour=4.0)
    store.update_attempt(run.id, 2, billed_until=a2.started_at + timedelta(minutes=15))

    assert a1.cost_usd == pytest.approx(3.0)
    assert store.get_attempt(run.id, 2).cost_usd == pytest.approx(1.0)
    assert store.get_run(run.id).cost_usd == pytest.approx(4.0)

    store.update_attempt(run.id, 2, cost_usd=0.5)  # an explicit cost wins
    assert store.get_run(run.id).cost_usd == pytest.approx(3.5)
