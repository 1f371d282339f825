"""A broker outage (Redis stopped and started again, its data on disk) shorter than the pool's
outage grace loses no attempt: the controller gives every worker ``lost_after_s`` of a
working broker to be heard again, whether it saw the outage or not. An attempt that is lost
for real is recovered only once its worker, were it cut off and still running, has stopped
the job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.errors import ProviderError
from corral.providers.base import Instance, InstanceState, Offer
from corral.providers.pool.provider import PoolProvider
from corral.queue.client import connect
from corral.queue.settings import PoolSettings
from support.redis_server import RedisServer
from support.waiting import wait_until

LOST_AFTER, GRACE, BEAT = 2.0, 5.0, 0.25


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _settings(broker: RedisServer) -> PoolSettings:
    return PoolSettings(
        broker_url=broker.url,
        name="outage",
        heartbeat_s=BEAT,
        lost_after_s=LOST_AFTER,
        outage_grace_s=GRACE,
    ).checked()


def _running_attempt(provider: PoolProvider, key: str = "run1-a1") -> Instance:
    """An attempt as the controller launched it and a worker claimed it, with one heartbeat."""
    fields = {"run_id": "run1", "attempt": 1, "queue": "outage.gpu", "task_id": "t1"}
    fields["outage_grace"] = provider.settings.outage_grace_s
    provider.attempts.create(key, fields=fields, bootstrap="{}", ttl_s=600)
    assert (
        provider.attempts.claim(key, worker="w0", host="h", lost_after_s=LOST_AFTER, delivery="d1")
        == "ok"
    )
    offer = Offer(provider="pool", offer_id="outage.gpu", region="pool", price_per_hour=0.0)
    return Instance(provider="pool", instance_id="pool-t1", key=key, offer=offer)


def _state(provider: PoolProvider, inst: Instance) -> InstanceState:
    return provider.status(inst).state


def test_a_broker_restart_longer_than_lost_after_loses_no_attempt(broker: RedisServer) -> None:
    settings = _settings(broker)
    seen = PoolProvider(settings, client=connect(settings))
    inst = _running_attempt(seen)
    assert _state(seen, inst) == InstanceState.PROVISIONING  # claimed, its agent starting
    broker.stop()
    with pytest.raises(ProviderError, match="broker"):
        seen.status(inst)  # this controller sees the outage
    time.sleep(LOST_AFTER + 0.5)  # the attempt's heartbeat expires while the broker is down
    broker.start()
    # a controller that saw the outage, and one that never did (started since): neither
    # declares the silent worker lost while the broker has been back for less than lost_after
    unaware = PoolProvider(settings, client=connect(settings))
    for provider in (seen, unaware):
        assert _state(provider, inst) == InstanceState.PROVISIONING
    # the worker is heard again: the attempt goes on
    state, _ = seen.attempts.heartbeat(inst.key, "w0", LOST_AFTER)
    assert state == "claimed"
    time.sleep(LOST_AFTER + 0.2)  # the broker is steady now; the worker still beats
    seen.attempts.heartbeat(inst.key, "w0", LOST_AFTER)
    assert _state(seen, inst) == InstanceState.PROVISIONING


def test_a_lost_attempt_is_recovered_only_after_its_workers_outage_grace(
    broker: RedisServer,
) -> None:
    """A worker cut off from the broker (the controller still reaches it) keeps its job for
    the outage grace; the controller declares the attempt lost after lost_after but reports
    it gone (PREEMPTED: recover it) only once that grace has surely passed."""
    settings = _settings(broker)
    provider = PoolProvider(settings, client=connect(settings))
    provider._broker_failed_at = None
    inst = _running_attempt(provider)
    # the broker itself just started: wait until it has been up for lost_after
    wait_until(
        lambda: provider.attempts.r.info("server")["uptime_in_seconds"] >= LOST_AFTER,
        10,
        0.1,
        "the broker to be up for lost_after",
    )
    wait_until(lambda: _state(provider, inst) == InstanceState.UNKNOWN, 10, 0.1, "the attempt lost")
    declared = time.monotonic()
    detail = provider.status(inst).detail
    assert "lost: no heartbeat" in detail and "outage grace" in detail
    state, _ = provider.attempts.heartbeat(inst.key, "w0", LOST_AFTER)
    assert state == "lost"  # the worker, heard again, is told to kill its job
    wait_until(
        lambda: _state(provider, inst) == InstanceState.PREEMPTED, 15, 0.1, "the fence to end"
    )
    waited = time.monotonic() - declared
    assert waited >= GRACE - LOST_AFTER - 0.5, waited


def test_the_outage_grace_is_at_least_lost_after() -> None:
    from corral.errors import BadInput

    with pytest.raises(BadInput, match="CORRAL_POOL_OUTAGE_GRACE"):
        PoolSettings(lost_after_s=30.0, outage_grace_s=10.0).checked()
    env = {"CORRAL_POOL_OUTAGE_GRACE": "5m"}
    assert PoolSettings.from_env(env).outage_grace_s == 300.0


@pytest.mark.slow
def test_a_pool_job_rides_out_a_broker_restart(
    broker: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real controller and ``corral worker``: Redis stopped for longer than lost_after (but
    within the outage grace) and started again while the job runs; the job is not stopped,
    the run succeeds on its first attempt, and the job ran once."""
    from control.helpers import start_controller, submit, wait_for, write_spec
    from corral.store import Store
    from support.pool import Workers, pool_env, scratch_pool

    with scratch_pool(broker_url=broker.url, outage_grace_s=30.0) as pool:
        for name, value in pool_env(pool).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("CORRAL_PROVIDERS", "pool")
        workers = Workers(pool, tmp_path / "machines", fake_gpus="L40S:1")
        work = tmp_path / "work"
        work.mkdir()
        marks = work / "marks"
        spec = write_spec(
            work,
            f"""
            name: outage
            resources: {{gpus: 1}}
            run: echo start >> {marks} && while [ ! -e {work}/go ]; do sleep 0.1; done && echo end >> {marks}
            """,
        )
        controller = None
        try:
            workers.start("m0", "0")
            run_id = submit(spec)
            store = Store.open()
            controller = start_controller(tick=0.2)
            wait_until(lambda: marks.exists(), 60, 0.1, "the job to start")
            broker.stop()
            time.sleep(LOST_AFTER * 2)  # every heartbeat key expires meanwhile
            broker.start()
            time.sleep(LOST_AFTER * 2)  # the controller looks again, the worker beats again
            (work / "go").write_text("")
            run = wait_for(store, run_id, {"SUCCEEDED", "FAILED", "STOPPED"}, timeout=90)
        finally:
            if controller is not None:
                controller.terminate()
                controller.wait(10)
            workers.stop_all()
        assert run.state == "SUCCEEDED", run.reason
        assert [a.exit_reason for a in store.attempts(run_id)] == ["succeeded"]
        assert marks.read_text().split() == ["start", "end"]  # one copy, never stopped
