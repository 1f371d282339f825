"""Retries with exponential backoff and jitter, Retry-After, giving up: on a fake clock."""

from __future__ import annotations

import random
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hookkit import SECRET, hooked_run

from corral.notify.dispatcher import Dispatcher
from corral.notify.sending import RetryPolicy, parse_retry_after


def _dispatcher(store, clock, **policy) -> Dispatcher:
    return Dispatcher(
        store,
        clock=clock,
        secret_resolver={"HOOK_SECRET": SECRET}.get,
        policy=RetryPolicy(**policy),
        rng=random.Random(7),
    )


def _expect_one_try_after(d: Dispatcher, clock, backoff: float) -> None:
    """Jitter puts the next try between 0.5 and 1 times ``backoff`` from now."""
    clock.advance(0.5 * backoff - 0.01)
    assert d.run_pending() == 0, "tried before the backoff"
    clock.advance(0.5 * backoff + 0.02)
    assert d.run_pending() == 1, "not tried once the backoff passed"


def test_server_errors_are_retried_with_exponential_backoff_and_jitter(store, clock, receivers):
    rx = receivers(secret=SECRET, statuses=[500, 502, 503, 500])
    run_id = hooked_run(store, {"url": rx.url, "secret": "HOOK_SECRET"})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock, max_attempts=6, base_delay=10, max_delay=60)
    d.tick()
    assert d.run_pending() == 1  # the first try fails at once
    for backoff in (10, 20, 40, 60):  # 10 * 2**n, capped at max_delay
        _expect_one_try_after(d, clock, backoff)
    assert [r.status for r in rx.requests] == [500, 502, 503, 500, 200]
    assert [r.headers["x-corral-attempt"] for r in rx.requests] == ["1", "2", "3", "4", "5"]
    assert len({r.headers["x-corral-delivery"] for r in rx.requests}) == 1
    assert len({r.body for r in rx.requests}) == 1  # the same bytes, re-signed each time
    assert len({r.headers["x-corral-timestamp"] for r in rx.requests}) == 5
    assert all(r.signature_ok for r in rx.requests)
    assert d.pending() == 0
    assert store.webhook_cursors(run_id)[0].delivered == 1


def test_jitter_spreads_retries_between_half_and_all_of_the_backoff():
    policy = RetryPolicy(base_delay=4, max_delay=100)
    rng = random.Random(1)
    delays = [policy.delay(3, rng) for _ in range(200)]
    assert all(8 <= x <= 16 for x in delays)
    assert max(delays) - min(delays) > 6  # really spread, not one value


def test_retry_after_is_honoured_on_429(store, clock, receivers):
    rx = receivers(statuses=[429], retry_after="120")
    run_id = hooked_run(store, {"url": rx.url})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock, base_delay=1)
    d.tick()
    d.run_pending()
    clock.advance(119)
    assert d.run_pending() == 0
    clock.advance(1.01)
    assert d.run_pending() == 1
    assert [r.status for r in rx.requests] == [429, 200]


def test_retry_after_as_an_http_date_or_garbage():
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(later, now.timestamp()) == pytest.approx(90)
    assert parse_retry_after("30", 0) == 30
    assert parse_retry_after("soon", 0) is None and parse_retry_after(None, 0) is None


def test_giving_up_records_an_event_and_the_next_event_still_goes_out(store, clock, receivers):
    rx = receivers(statuses=[500, 500, 500])
    run_id = hooked_run(store, {"url": rx.url})
    store.add_event(run_id, "run.started", "go")
    store.add_event(run_id, "run.finished", "done", data={"state": "SUCCEEDED"})
    d = _dispatcher(store, clock, max_attempts=3, base_delay=1, max_delay=1)
    d.tick()
    for _ in range(3):
        d.run_pending()
        clock.advance(1.01)
    d.run_pending()
    assert [(r.type, r.status) for r in rx.requests] == [
        ("run.started", 500),
        ("run.started", 500),
        ("run.started", 500),
        ("run.finished", 200),
    ]
    (failed,) = store.events(run_id, types=["webhook.failed"])
    assert failed.data["attempts"] == 3 and failed.data["error"] == "HTTP 500"
    assert failed.data["event"] == "run.started"
    assert "gave up on run.started after 3 attempts" in failed.reason
    assert "t0ken" not in failed.reason  # scheme://host:port only
    cursor = store.webhook_cursors(run_id)[0]
    assert (cursor.delivered, cursor.failed) == (1, 1)


def test_a_client_error_is_not_retried(store, clock, receivers):
    rx = receivers(statuses=[404])
    run_id = hooked_run(store, {"url": rx.url})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock)
    d.tick()
    d.run_pending()
    clock.advance(3600)
    assert d.run_pending() == 0
    assert len(rx.requests) == 1
    (failed,) = store.events(run_id, types=["webhook.failed"])
    assert failed.data["attempts"] == 1 and failed.data["error"] == "HTTP 404"


def test_a_refused_connection_is_retried_then_given_up(store, clock):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_id = hooked_run(store, {"url": f"http://127.0.0.1:{port}/secret-path"})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock, max_attempts=2, base_delay=5)
    d.tick()
    assert d.run_pending() == 1
    assert d.run_pending() == 0
    clock.advance(5.01)
    assert d.run_pending() == 1
    (failed,) = store.events(run_id, types=["webhook.failed"])
    assert failed.data["error"].startswith("ConnectError")
    assert "secret-path" not in failed.reason


def test_a_timed_out_delivery_is_sent_again_with_the_same_delivery_id(store, clock, receivers):
    rx = receivers(delay=0.6)
    run_id = hooked_run(store, {"url": rx.url})
    store.add_event(run_id, "run.started", "go")
    d = _dispatcher(store, clock, timeout=0.2, base_delay=1)
    d.tick()
    d.run_pending()  # times out; the receiver got it all the same
    rx.delay = 0
    clock.advance(1.01)
    d.run_pending()
    ids = [r.headers["x-corral-delivery"] for r in rx.requests]
    assert len(ids) == 2 and ids[0] == ids[1]  # at-least-once: dedupe on the delivery id
    assert store.webhook_cursors(run_id)[0].delivered == 1
