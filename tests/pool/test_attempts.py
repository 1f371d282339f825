"""The attempt records on a real Redis server: one claim per attempt, ever; cancel, stop,
lost and the fence that stops a worker whose attempt was given up."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from corral.errors import BadInput
from corral.queue import attempts as states
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect, safe_url
from corral.queue.keys import Keys, broker_priority
from corral.queue.settings import PoolSettings, parse_duration
from support.pool import scratch_pool


@pytest.fixture
def store() -> Iterator[AttemptStore]:
    with scratch_pool() as settings:
        client = connect(settings)
        yield AttemptStore(client, Keys(settings.name))
        client.close()


def _create(store: AttemptStore, key: str = "r1-a1") -> None:
    store.create(key, fields={"run_id": "r1", "queue": "q"}, bootstrap='{"x": 1}', ttl_s=60)


def test_create_is_idempotent_and_keeps_the_first_bootstrap(store: AttemptStore) -> None:
    rec, created = store.create("r1-a1", fields={"run_id": "r1"}, bootstrap="one", ttl_s=60)
    assert created and rec.state == states.QUEUED and rec.run_id == "r1"
    rec2, created2 = store.create("r1-a1", fields={"run_id": "r1"}, bootstrap="two", ttl_s=60)
    assert not created2 and rec2.created_at == rec.created_at
    assert store.bootstrap("r1-a1") == "one"


def test_only_one_claim_ever_wins(store: AttemptStore) -> None:
    _create(store)
    first = store.claim("r1-a1", worker="w1", host="h", lost_after_s=5, delivery="d1")
    second = store.claim("r1-a1", worker="w2", host="h", lost_after_s=5, delivery="d2")
    assert (first, second) == ("ok", states.CLAIMED)
    rec = store.get("r1-a1")
    assert rec is not None and rec.worker == "w1" and rec.alive
    store.finish("r1-a1", "w1", states.FINISHED, "done", 0)
    # a re-delivery after the end is refused too, and the bootstrap (secrets) is gone
    assert store.claim("r1-a1", worker="w2", host="h", lost_after_s=5, delivery="d3") == "finished"
    assert store.bootstrap("r1-a1") is None
    assert store.claim("nope-a1", worker="w2", host="h", lost_after_s=5, delivery="d4") == "missing"


def test_cancel_before_a_claim_means_no_worker_runs_it(store: AttemptStore) -> None:
    _create(store)
    assert store.cancel("r1-a1", grace_s=3) == states.CANCELLED
    assert store.claim("r1-a1", worker="w1", host="h", lost_after_s=5, delivery="d") == "cancelled"
    assert store.bootstrap("r1-a1") is None


def test_cancel_of_a_held_attempt_asks_its_worker_to_stop_once(store: AttemptStore) -> None:
    _create(store)
    store.claim("r1-a1", worker="w1", host="h", lost_after_s=5, delivery="d")
    assert store.cancel("r1-a1", grace_s=3) == states.CLAIMED
    assert store.cancel("r1-a1", grace_s=9) == states.CLAIMED
    assert store.heartbeat("r1-a1", "w1", 5) == (states.CLAIMED, 3.0)


def test_a_silent_worker_is_lost_and_fenced(store: AttemptStore) -> None:
    _create(store)
    store.claim("r1-a1", worker="w1", host="h", lost_after_s=0.2, delivery="d")
    assert store.mark_lost("r1-a1", "silent") == states.CLAIMED  # still alive: not lost
    time.sleep(0.3)
    assert store.mark_lost("r1-a1", "silent") == states.LOST
    # the worker comes back: its heartbeat says lost (it kills its agent) and revives nothing
    assert store.heartbeat("r1-a1", "w1", 5)[0] == states.LOST
    assert store.get("r1-a1").alive is False  # type: ignore[union-attr]
    # and it cannot end the attempt as if it had finished
    assert store.finish("r1-a1", "w1", states.FINISHED, "late") == states.LOST
    # another worker's heartbeat is "other"
    _create(store, "r2-a1")
    store.claim("r2-a1", worker="w1", host="h", lost_after_s=5, delivery="d")
    assert store.heartbeat("r2-a1", "w2", 5)[0] == "other"


def test_a_lost_attempts_bootstrap_and_its_secrets_go_at_once(store: AttemptStore) -> None:
    """A worker killed (or a finish lost in a Redis outage) never deletes the bootstrap
    itself: declaring the attempt lost does."""
    _create(store)
    store.claim("r1-a1", worker="w1", host="h", lost_after_s=0.2, delivery="d")
    time.sleep(0.3)
    assert store.bootstrap("r1-a1") is not None
    assert store.mark_lost("r1-a1", "silent") == states.LOST
    assert store.bootstrap("r1-a1") is None
    assert store.get("r1-a1").state == states.LOST  # type: ignore[union-attr]


def test_a_bootstrap_lives_no_longer_than_its_attempt_can(store: AttemptStore) -> None:
    store.create("r1-a1", fields={"run_id": "r1"}, bootstrap="secret", ttl_s=600)
    assert 0 < store.r.ttl(store.keys.boot("r1-a1")) <= 600
    assert store.r.ttl(store.keys.attempt("r1-a1")) > 600  # the record outlives it (a week)


def test_the_sweep_deletes_the_bootstraps_of_ended_and_unknown_attempts(
    store: AttemptStore,
) -> None:
    for key in ("q-a1", "held-a1", "ended-a1", "gone-a1"):
        _create(store, key)
    store.claim("held-a1", worker="w1", host="h", lost_after_s=5, delivery="d")
    store.claim("ended-a1", worker="w1", host="h", lost_after_s=5, delivery="d")
    # the worker ended it but its clean-up of the bootstrap never ran (killed in between)
    store.r.hset(store.keys.attempt("ended-a1"), "state", states.FINISHED)
    store.r.delete(store.keys.attempt("gone-a1"))  # the record expired or was deleted
    assert sorted(store.sweep_boots()) == ["ended-a1", "gone-a1"]
    assert store.bootstrap("q-a1") is not None and store.bootstrap("held-a1") is not None
    assert store.bootstrap("ended-a1") is None and store.bootstrap("gone-a1") is None


def test_duplicates_are_recorded(store: AttemptStore) -> None:
    store.note_duplicate("r1-a1", "w2", "claimed", "d2")
    assert [(d["key"], d["worker"], d["state"]) for d in store.duplicates()] == [
        ("r1-a1", "w2", "claimed")
    ]


def test_settings_from_env_and_their_errors() -> None:
    s = PoolSettings.from_env(
        {
            "CORRAL_POOL_BROKER": "redis://:pw@10.0.0.5:6379/2",
            "CORRAL_POOL_NAME": "team-a",
            "CORRAL_POOL_PRICE_PER_GPU_HOUR": "1.5",
            "CORRAL_POOL_MAX_RUNTIME": "2d",
        }
    )
    assert (s.name, s.price_per_gpu_hour, s.max_runtime_s) == ("team-a", 1.5, 172800.0)
    assert s.visibility_timeout_s > s.time_limits(None, 30)[1]  # longer than any task
    assert s.time_limits(3600, 30) == (3600 + s.start_margin_s, 3600 + s.start_margin_s + 90)
    assert safe_url(s.broker_url) == "redis://:***@10.0.0.5:6379/2"
    for env, word in [
        ({"CORRAL_POOL_BROKER": "amqp://x"}, "CORRAL_POOL_BROKER"),
        ({"CORRAL_POOL_NAME": "Bad Name"}, "CORRAL_POOL_NAME"),
        ({"CORRAL_POOL_PRICE_PER_GPU_HOUR": "-1"}, "CORRAL_POOL_PRICE_PER_GPU_HOUR"),
        ({"CORRAL_POOL_MAX_RUNTIME": "soon"}, "CORRAL_POOL_MAX_RUNTIME"),
        ({"CORRAL_POOL_LOST_AFTER": "1s"}, "CORRAL_POOL_LOST_AFTER"),
        ({"CORRAL_POOL_SHARED_FILES": "maybe"}, "CORRAL_POOL_SHARED_FILES"),
    ]:
        with pytest.raises(BadInput, match=word):
            PoolSettings.from_env(env)
    assert parse_duration("15m", "x") == 900.0
    assert PoolSettings.from_env({"CORRAL_POOL_SHARED_FILES": "1"}).shared_files
    assert not PoolSettings.from_env({}).shared_files


def test_the_code_is_shipped_to_a_worker_unless_the_files_are_shared() -> None:
    from dataclasses import replace

    from corral.providers.base import NodeProfile, Offer
    from corral.providers.pool import PoolProvider

    offer = Offer(provider="pool", offer_id="corral.l40s.x1", region="corral")
    shipped = PoolProvider(PoolSettings()).node_profile(offer, "r-1")
    assert shipped.workdir == "/corral/runs/r-1/work"
    assert shipped.inline_code_max > 0  # a small bundle rides in the task: no upload
    shared = PoolProvider(replace(PoolSettings(), shared_files=True)).node_profile(offer, "r-1")
    assert shared == NodeProfile(container_engine="auto")


def test_higher_priority_is_served_first_on_redis() -> None:
    assert broker_priority(9) == 0 and broker_priority(0) == 9 and broker_priority(5) == 4
    assert Keys("p").queue("NVIDIA L40S", 2) == "p.nvidia-l40s.x2"


def test_a_preempted_attempt_is_asked_to_stop_and_flagged(store: AttemptStore) -> None:
    _create(store)
    assert store.preempt("r1-a1", 4) == states.QUEUED  # never ran: nothing to preempt
    store.claim("r1-a1", worker="w1", host="h", lost_after_s=5, delivery="d")
    assert store.preempt("r1-a1", 4) == states.CLAIMED
    assert store.heartbeat("r1-a1", "w1", 5) == (states.CLAIMED, 4.0)
    rec = store.get("r1-a1")
    assert rec is not None and rec.preempted
    store.finish("r1-a1", "w1", states.PREEMPTED, "taken away")
    assert store.preempt("r1-a1", 4) == states.PREEMPTED
