"""The background threads: slow or failing receivers never hold up the tick or other webhooks."""

from __future__ import annotations

import time

from hookkit import hooked_run, simulate_run

from corral.notify.dispatcher import Dispatcher
from corral.notify.sending import RetryPolicy
from support.waiting import wait_until


def test_slow_and_failing_receivers_do_not_slow_the_tick_or_other_webhooks(store, clock, receivers):
    good = receivers()
    failing = receivers(statuses=[500] * 1000)
    slow = receivers(delay=5.0)
    run_id = hooked_run(store, {"url": slow.url}, {"url": failing.url}, {"url": good.url})
    other = hooked_run(store, {"url": good.url}, name="other")
    expected = simulate_run(store, run_id, clock)
    store.add_event(other, "run.started", "go")
    d = Dispatcher(
        store,
        policy=RetryPolicy(base_delay=0.05, max_delay=0.2, max_attempts=1000, timeout=10),
        poll_interval=0.05,
    )
    d.start()
    try:
        started = time.monotonic()
        good.wait_for(len(expected) + 1, timeout=2.5)
        # all there, while the slow receiver still holds its first request (5 s), and it
        # gets no second one before answering the first: one at a time per webhook
        assert time.monotonic() - started < 2.5
        assert len(slow.requests) == 1
        mine = [r.type for r in good.accepted() if r.json["run"]["id"] == run_id]
        assert mine == expected
        # retried in the background, with backoff
        wait_until(lambda: len(failing.requests) >= 3, 2.0, 0.01, "three tries of the failing hook")
        assert len(failing.requests) >= 3
        assert len(slow.requests) == 1  # still in its first request
        for _ in range(20):  # and the tick stays quick all along
            t0 = time.monotonic()
            d.tick()
            assert time.monotonic() - t0 < 2.0  # well under the slow receiver's 5 s
    finally:
        d.stop(timeout=0.5)
    # the failing receiver only ever saw the first event: one at a time, in order
    assert {r.type for r in failing.requests} == {expected[0]}
