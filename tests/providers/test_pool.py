"""The pool provider against a real ``corral worker`` on the local Redis server: the provider
contract, offers, and an attempt delivered twice that runs once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from corral.errors import Conflict, InfeasibleRequest
from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.providers.pool import PoolProvider
from corral.queue.app import TASK_NAME
from corral.queue.settings import PoolSettings
from support.pool import Workers, scratch_pool
from support.waiting import wait_until

from .contract import ProviderContract, new_key, trivial_plan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolSettings]:
    """A pool with one worker (one fake L40S) for the whole module."""
    with scratch_pool(price_per_gpu_hour=0.5) as settings:
        workers = Workers(settings, tmp_path_factory.mktemp("machines"), fake_gpus="L40S:1")
        try:
            workers.start("m0", "0")
            yield settings
        finally:
            workers.stop_all()


ONE_L40S = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1)


class TestPoolContract(ProviderContract):
    running_timeout = 60.0

    @pytest.fixture
    def provider(self, pool: PoolSettings) -> PoolProvider:
        return PoolProvider(pool)

    @pytest.fixture
    def requirements(self) -> Requirements:
        return ONE_L40S


def test_offers_are_the_pools_queues_at_its_price(pool: PoolSettings) -> None:
    provider = PoolProvider(pool)
    [offer] = provider.offers(Requirements(gpu_count_min=1, gpu_count_max=4))
    assert (offer.gpu_type, offer.gpu_count, offer.price_per_hour) == ("L40S", 1, 0.5)
    assert offer.details["workers"] == 1 and offer.offer_id == f"{pool.name}.l40s.x1"
    assert provider.offers(ONE_L40S.model_copy(update={"max_hourly_price": 0.4})) == []
    cases = [
        (Requirements(gpu_type="A100", gpu_count_min=1, gpu_count_max=1), "serve L40S x1"),
        (Requirements(gpu_count_min=2, gpu_count_max=2), "serve L40S x1"),
        (ONE_L40S.model_copy(update={"spot": True}), "no spot"),
        (Requirements(), "no CPU worker has joined"),
        (ONE_L40S.model_copy(update={"max_runtime_s": 7200.0}), "CORRAL_POOL_MAX_RUNTIME"),
    ]
    for req, words in cases:
        with pytest.raises(InfeasibleRequest, match=words):
            provider.offers(req)


def test_a_pool_no_worker_joined_says_how_to_start_one() -> None:
    with scratch_pool() as settings, pytest.raises(InfeasibleRequest, match="corral worker"):
        PoolProvider(settings).offers(ONE_L40S)


def test_an_attempt_delivered_twice_runs_once(pool: PoolSettings, tmp_path: Path) -> None:
    provider = PoolProvider(pool)
    offer = provider.offers(ONE_L40S)[0]
    key = new_key()
    plan = trivial_plan(tmp_path, key, run="echo ran >> runs.txt; sleep 60")
    inst = provider.launch(offer, Bootstrap(plan=plan, token="t-" + uuid.uuid4().hex), key)
    wait_until(lambda: provider.status(inst).state == InstanceState.RUNNING, 60)
    wait_until(lambda: (tmp_path / "runs.txt").exists(), 60)  # the job itself started
    # the broker hands the same attempt out again (a re-delivery after the visibility
    # timeout, a repeated send): the worker, free again once the attempt is over, drops it
    provider.app.send_task(TASK_NAME, args=[key], queue=offer.offer_id, task_id=str(uuid.uuid4()))
    ProviderContract().terminate(provider, inst)
    wait_until(lambda: any(d["key"] == key for d in provider.attempts.duplicates()), 60)
    assert (tmp_path / "runs.txt").read_text() == "ran\n"
    assert provider.status(inst).state == InstanceState.TERMINATED
    # once over, its bootstrap (agent token, job env) is gone from the broker
    assert provider.attempts.bootstrap(key) is None


def test_settings_are_the_controllers_environment(pool: PoolSettings, monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_POOL_NAME", pool.name)
    monkeypatch.setenv("CORRAL_POOL_BROKER", pool.broker_url)
    assert PoolProvider().settings == replace(
        PoolSettings(), broker_url=pool.broker_url, name=pool.name
    )


@pytest.mark.parametrize(
    "change,words",
    [
        ({"workdir": "/nonexistent/job"}, "does not exist on this worker"),
        ({"checkpoint_dir": "/proc/no-checkpoints-here"}, "the agent exited with code 2"),
    ],
)
def test_an_attempt_that_cannot_start_fails_saying_why(
    pool: PoolSettings, tmp_path: Path, change: dict[str, str], words: str
) -> None:
    provider = PoolProvider(pool)
    offer = provider.offers(ONE_L40S)[0]
    key = new_key()
    plan = trivial_plan(tmp_path, key).model_copy(update=change)
    inst = provider.launch(offer, Bootstrap(plan=plan, token="t-" + uuid.uuid4().hex), key)
    st = wait_until(lambda: (s := provider.status(inst)).state.gone and s, 60)
    assert st.state == InstanceState.FAILED and words in st.detail, st.detail
    assert provider.attempts.bootstrap(key) is None


def test_preempting_an_attempt_stops_it_gracefully(pool: PoolSettings, tmp_path: Path) -> None:
    provider = PoolProvider(pool)
    offer = provider.offers(ONE_L40S)[0]
    key = new_key()
    run = "trap 'echo saved >> graceful.txt; exit 75' TERM; echo up > up.txt; sleep 60 & wait"
    plan = trivial_plan(tmp_path, key, run=run)
    inst = provider.launch(offer, Bootstrap(plan=plan, token="t-" + uuid.uuid4().hex), key)
    wait_until(lambda: (tmp_path / "up.txt").exists(), 60)
    provider.preempt(inst, grace=5)
    assert provider.status(inst).state == InstanceState.PREEMPTED  # from now on
    wait_until(lambda: provider.attempts.get(key).state == "preempted", 60)  # type: ignore[union-attr]
    assert (tmp_path / "graceful.txt").read_text() == "saved\n"  # SIGTERM, not SIGKILL
    assert provider.status(inst).state == InstanceState.PREEMPTED
    with pytest.raises(Conflict, match="nothing to preempt"):
        provider.preempt(inst)
    ProviderContract().terminate(provider, inst)  # already gone: terminate is a no-op
