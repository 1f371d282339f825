"""Totals for monitoring: runs and cost by state, webhook deliveries, preemptions and
recoveries, in one query each."""

from __future__ import annotations

from storekit import make_run

from corral.store import Store


def test_run_totals_count_and_sum_by_state(store: Store) -> None:
    assert store.run_totals() == []
    a, b, c = (make_run(store, n) for n in ("a", "b", "c"))
    store.update_run(a.id, cost_usd=1.5)
    store.update_run(b.id, cost_usd=2.25)
    store.transition(c.id, "CANCELLED", "test")
    store.update_run(c.id, cost_usd=0.5)
    assert [(t.state, t.runs, t.cost_usd) for t in store.run_totals()] == [
        ("CANCELLED", 1, 0.5),
        ("PENDING", 2, 3.75),
    ]


def test_webhook_totals_add_up_every_cursor(store: Store) -> None:
    totals = store.webhook_totals()
    assert (totals.delivered, totals.failed) == (0, 0)
    a, b = make_run(store, "a"), make_run(store, "b")
    store.advance_webhook_cursor(a.id, 0, 1, delivered=2)
    store.advance_webhook_cursor(a.id, 1, 1, delivered=1, failed=1)
    store.advance_webhook_cursor(b.id, 0, 1, failed=2)
    totals = store.webhook_totals()
    assert (totals.delivered, totals.failed) == (3, 3)


def test_attempt_totals_count_preemptions_and_recoveries(store: Store) -> None:
    totals = store.attempt_totals()
    assert (totals.preempted, totals.recoveries) == (0, 0)
    a, b = make_run(store, "a"), make_run(store, "b")

    def attempt(run_id: str, number: int, **fields: object) -> None:
        store.create_attempt(run_id, number, provider="local", offer={}, price_per_hour=1.0)
        store.update_attempt(run_id, number, **fields)

    attempt(a.id, 1, exit_reason="preempted")
    attempt(a.id, 2, exit_reason="preempted")
    # a recovery that found no capacity, then launched: the same attempt number, counted once
    attempt(a.id, 3, exit_reason="no_capacity")
    store.update_attempt(a.id, 3, exit_reason=None)
    attempt(b.id, 1, exit_reason="failed")
    attempt(b.id, 2)
    totals = store.attempt_totals()
    assert (totals.preempted, totals.recoveries) == (2, 3)
