"""Durability: a new dispatcher (a restarted controller) resumes from the store's cursors."""

from __future__ import annotations

from hookkit import hooked_run, simulate_run

from corral.notify.dispatcher import Dispatcher


def test_restart_resumes_from_the_cursor_without_duplicating_delivered_events(
    store, clock, receivers
):
    rx = receivers(statuses=[200, 200, 500])  # the 3rd delivery fails once, then we "crash"
    run_id = hooked_run(store, {"url": rx.url})
    expected = simulate_run(store, run_id, clock)
    first = Dispatcher(store, clock=clock)
    first.tick()
    first.run_pending()  # 2 delivered, the 3rd waits for a retry: the controller dies here
    assert len(rx.accepted()) == 2
    store.add_event(run_id, "run.started", "a late event")  # written while nobody dispatches
    second = Dispatcher(store, clock=clock)
    second.tick()
    second.run_pending()
    assert rx.types() == [*expected, "run.started"]  # nothing delivered twice, nothing lost
    ids = [r.headers["x-corral-delivery"] for r in rx.accepted()]
    assert len(set(ids)) == len(ids)
    # only the in-flight one was sent again (its first try got the 500)
    assert [r.type for r in rx.requests].count(expected[2]) == 2


def test_events_of_a_run_nobody_dispatched_yet_are_delivered_after_a_restart(
    store, clock, receivers
):
    rx = receivers()
    first = Dispatcher(store, clock=clock)
    early = hooked_run(store, {"url": rx.url}, name="early")
    store.add_event(early, "run.started", "go")
    first.tick()
    first.run_pending()
    first.tick()  # saves the feed position past run "early"
    late = hooked_run(store, {"url": rx.url}, name="late")
    store.add_event(late, "run.started", "go")  # the controller crashed before its next tick
    second = Dispatcher(store, clock=clock)
    second.tick()
    second.run_pending()
    assert [r.json["run"]["id"] for r in rx.accepted()] == [early, late]


def test_the_feed_position_never_passes_an_undelivered_event(store, clock, receivers):
    down = receivers(statuses=[500] * 10)
    up = receivers()
    slow_run = hooked_run(store, {"url": down.url}, name="down")
    fast_run = hooked_run(store, {"url": up.url}, name="up")
    store.add_event(slow_run, "run.started", "go")
    stuck = store.events()[-1].id
    for _ in range(5):
        store.add_event(fast_run, "run.started", "go")
    d = Dispatcher(store, clock=clock)
    d.tick()
    d.run_pending()
    d.tick()
    assert len(up.accepted()) == 5
    assert store.event_position("webhooks") == stuck - 1
    clock.advance(10)  # past the first backoff: now it goes through
    down.statuses.clear()
    d.run_pending()
    d.tick()
    assert store.event_position("webhooks") == store.events()[-1].id


def test_progress_throttling_survives_a_restart(store, clock, receivers):
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url, "events": ["progress"], "progress_interval": 60})
    store.add_event(run_id, "progress", "p1", data={"stage": "train", "step": 1})
    d = Dispatcher(store, clock=clock)
    d.tick()
    d.run_pending()
    clock.advance(30)
    store.add_event(run_id, "progress", "p2", data={"stage": "train", "step": 2})
    clock.advance(31)
    store.add_event(run_id, "progress", "p3", data={"stage": "train", "step": 3})
    again = Dispatcher(store, clock=clock)
    again.tick()
    again.run_pending()
    assert [r.json["data"]["step"] for r in rx.accepted()] == [1, 3]


def test_each_stages_progress_throttle_survives_a_restart(store, clock, receivers):
    """Parallel stages are throttled each on its own, and a restarted dispatcher remembers
    every stage's last progress, not only the newest one's."""
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url, "events": ["progress"], "progress_interval": 60})
    for stage in ("train", "eval", "export"):
        store.add_event(run_id, "progress", stage, data={"stage": stage, "step": 1})
        clock.advance(1)
    d = Dispatcher(store, clock=clock)
    d.tick()
    d.run_pending()
    clock.advance(30)  # 31-33 s after each stage's first (at 0, 1 and 2 s): all too soon
    for stage in ("train", "eval", "export"):
        store.add_event(run_id, "progress", stage, data={"stage": stage, "step": 2})
    clock.advance(28)  # 61 s after train's first, 59 after export's
    store.add_event(run_id, "progress", "train", data={"stage": "train", "step": 3})
    store.add_event(run_id, "progress", "export", data={"stage": "export", "step": 3})
    again = Dispatcher(store, clock=clock)
    again.tick()
    again.run_pending()
    sent = [(r.json["data"]["stage"], r.json["data"]["step"]) for r in rx.accepted()]
    assert sent == [("train", 1), ("eval", 1), ("export", 1), ("train", 3)]


def test_a_small_queue_reads_the_rest_from_the_store_in_order(store, clock, receivers):
    rx = receivers()
    run_id = hooked_run(store, {"url": rx.url})
    for i in range(12):
        store.add_event(run_id, "stage.started", f"s{i}", data={"stage": f"s{i}"})
    d = Dispatcher(store, clock=clock, queue_size=3)
    for _ in range(6):
        d.tick()
        assert d.pending() <= 3
        d.run_pending()
    assert [r.json["data"]["stage"] for r in rx.accepted()] == [f"s{i}" for i in range(12)]
    d.tick()
    assert store.event_position("webhooks") == store.events()[-1].id


class FlakyStore:
    """The real store, but ``get_run`` fails the first ``failures`` times (a database hiccup)."""

    def __init__(self, store, failures: int):
        self._store = store
        self.failures = failures

    def get_run(self, ref):
        if self.failures:
            self.failures -= 1
            from corral.errors import StoreError

            raise StoreError("database is busy")
        return self._store.get_run(ref)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_store_failure_during_a_tick_loses_and_repeats_nothing(store, clock, receivers):
    rx = receivers()
    a = hooked_run(store, {"url": rx.url}, name="a")
    store.add_event(a, "run.started", "go")
    d = Dispatcher(FlakyStore(store, failures=0), clock=clock)
    d.tick()
    d.run_pending()
    b = hooked_run(store, {"url": rx.url}, name="b")
    store.add_event(a, "stage.started", "a", data={"stage": "x"})
    store.add_event(b, "run.started", "go")
    d.store.failures = 1  # discovering run b fails once, after a's event was queued
    assert d.tick() == 0
    d.tick()
    d.run_pending()
    got = [(r.json["run"]["id"], r.type) for r in rx.accepted()]
    assert [t for run, t in got if run == a] == ["run.started", "stage.started"]
    assert [t for run, t in got if run == b] == ["run.started"]
