"""Multi-node jobs on the worker pool (``resources.nodes``, docs/multinode.md): each node is
one attempt of the pool claimed by one worker, never two nodes of one gang on one host; the
head's address is its worker's, the port a slot leased per run. End to end: real Redis, a
real controller and two ``corral worker`` processes standing for two hosts (``--host``); an
unmodified ``torchrun`` command meets across them (gloo on CPU over loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.providers.base import Instance, Offer, Requirements
from corral.providers.pool.gang import (
    PORT_FIRST,
    PORT_LAST,
    PORT_SLOTS,
    PORT_WIDTH,
    lease_port,
    renew_port,
)
from corral.providers.pool.provider import PoolProvider
from corral.queue import attempts as states
from corral.queue.attempts import AttemptStore
from corral.queue.client import connect
from corral.queue.keys import Keys
from corral.queue.settings import PoolSettings
from corral.store import Store
from support.gang_jobs import ALL_REDUCE as TRAIN
from support.gang_jobs import SHARDED, TWO_NODE_SPEC
from support.pool import Workers, pool_env, scratch_pool
from support.waiting import wait_until

ENDED = {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}


@pytest.fixture
def attempts() -> Iterator[AttemptStore]:
    with scratch_pool() as settings:
        client = connect(settings)
        yield AttemptStore(client, Keys(settings.name))
        client.close()


def _node(store: AttemptStore, key: str, run: str = "r1", rank: int = 0) -> None:
    fields = {"run_id": run, "queue": "q", "gang": run, "rank": rank}
    store.create(key, fields=fields, bootstrap="{}", ttl_s=60)


def test_no_two_nodes_of_one_gang_are_claimed_on_one_host(attempts: AttemptStore) -> None:
    _node(attempts, "r1-a1", rank=0)
    _node(attempts, "r1-a1-k1", rank=1)
    _node(attempts, "r2-a1", run="r2")  # another gang's node
    claim = attempts.claim
    assert claim("r1-a1", worker="a-cpu0", host="a", lost_after_s=5, delivery="d") == "ok"
    # a second worker of host a may not take node 1: it stays queued for another host
    assert claim("r1-a1-k1", worker="a-cpu1", host="a", lost_after_s=5, delivery="d") == (
        states.SAME_HOST
    )
    rec = attempts.get("r1-a1-k1")
    assert rec is not None and rec.state == states.QUEUED and rec.gang == "r1" and rec.rank == 1
    # another gang's node on host a, and node 1 on host b, are fine
    assert claim("r2-a1", worker="a-cpu1", host="a", lost_after_s=5, delivery="d") == "ok"
    assert claim("r1-a1-k1", worker="b-cpu0", host="b", lost_after_s=5, delivery="d") == "ok"
    # once host a's node has ended, host a may hold a node of the gang again (a repair)
    attempts.finish("r1-a1", "a-cpu0", states.FINISHED, "done", 0)
    _node(attempts, "r1-a2", rank=0)
    assert claim("r1-a2", worker="a-cpu0", host="a", lost_after_s=5, delivery="d") == "ok"
    # a lone attempt (no gang) is never refused for its host
    attempts.create("r3-a1", fields={"run_id": "r3", "queue": "q"}, bootstrap="{}", ttl_s=60)
    assert claim("r3-a1", worker="a-cpu2", host="a", lost_after_s=5, delivery="d") == "ok"


def test_each_running_gang_gets_a_port_slot_of_its_own(attempts: AttemptStore) -> None:
    r, keys = attempts.r, attempts.keys
    first = lease_port(r, keys, "run-a", 60)
    assert lease_port(r, keys, "run-a", 60) == first  # the run's own slot, renewed
    ports = {first} | {lease_port(r, keys, f"run-{i}", 60) for i in range(PORT_SLOTS - 1)}
    assert len(ports) == PORT_SLOTS  # every run apart: no two gangs share a port
    assert all(p >= PORT_FIRST and p + PORT_WIDTH - 1 <= PORT_LAST for p in ports)
    assert all((p - PORT_FIRST) % PORT_WIDTH == 0 for p in ports)
    assert 0 < r.ttl(keys.gang_port_of("run-a")) <= 60  # leased, not held forever
    r.expire(keys.gang_port_of("run-a"), 5)
    assert renew_port(r, keys, "run-a", 60) and r.ttl(keys.gang_port_of("run-a")) > 5
    assert not renew_port(r, keys, "no-such-run", 60)
    # every slot leased: the run's hash slot, in the range still
    extra = lease_port(r, keys, "one-too-many", 60)
    assert extra in ports


def test_the_head_s_address_is_its_worker_s_once_one_runs_it(pool: PoolSettings) -> None:
    provider = PoolProvider(pool)
    offer = Offer(provider="pool", offer_id=f"{pool.name}.cpu.x0", region=pool.name)
    head = Instance(provider="pool", instance_id="pool-x", key="r9-a1", offer=offer)
    assert provider.gang_address(head) == ""  # no such attempt yet: the nodes wait
    _node(provider.attempts, "r9-a1", run="r9")
    assert provider.gang_address(head) == ""  # queued
    provider.attempts.claim("r9-a1", worker="w", host="h", lost_after_s=5, delivery="d")
    provider.attempts.update("r9-a1", state=states.RUNNING, endpoint="http://10.0.0.7:41234")
    assert provider.gang_address(head) == "10.0.0.7"
    # each look at a living head renews its gang's port lease
    port = lease_port(provider.attempts.r, provider.keys, "r9", 5)
    assert provider.gang_port("r9") == port
    provider.attempts.r.expire(provider.keys.gang_port_of("r9"), 5)
    provider.status(head)
    assert provider.attempts.r.ttl(provider.keys.gang_port_of("r9")) > 5


SPEC = TWO_NODE_SPEC.replace("PROVIDER", "pool")


@pytest.fixture
def workers(pool: PoolSettings, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(pool, tmp_path / "machines", fake_gpus="")
    try:
        yield w
    finally:
        w.stop_all()


def _host(workers: Workers, host: str, tmp_path: Path, slots: int = 1) -> None:
    """A worker machine standing for host ``host``, its checkpoints on the shared disk."""
    workers.start(
        host, "", "--host", host, "--checkpoint-dir", str(tmp_path / "shared"), cpu_slots=slots
    )


def _logs(run_id: str, store: Store) -> str:
    from cli.test_debug import cli

    return cli("logs", run_id)[1]


def test_a_gang_s_offer_counts_the_queue_s_hosts(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    _host(workers, "hA", tmp_path, slots=2)
    provider = PoolProvider(pool)
    (offer,) = provider.offers(Requirements(nodes=2))
    assert offer.details["hosts"] == 1 and offer.details["workers_free"] == 2
    assert offer.availability == "none"  # two free workers, but one host: no gang of 2 yet
    (lone,) = provider.offers(Requirements())
    assert lone.availability == "high"
    _host(workers, "hB", tmp_path)
    (offer,) = provider.offers(Requirements(nodes=2))
    assert offer.details["hosts"] == 2 and offer.availability == "high"


@pytest.mark.slow
def test_a_two_node_torchrun_job_meets_across_two_hosts_of_the_pool(
    pool: PoolSettings, workers: Workers, tmp_path: Path
) -> None:
    pytest.importorskip("torch.distributed")
    _host(workers, "hA", tmp_path)
    _host(workers, "hB", tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    run_id = submit(write_spec(work, SPEC))
    store = Store.open()
    controller = start_controller(tick=0.2)
    try:
        run = wait_for(store, run_id, ENDED, timeout=180)
    finally:
        controller.terminate()
        controller.wait(10)
    logs = _logs(run_id, store)
    assert run.state == "SUCCEEDED", (run.reason, logs)
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    head, node1 = attempts.get(f"{run_id}-a1"), attempts.get(f"{run_id}-a1-k1")
    assert head is not None and node1 is not None
    # each node on a worker of its own host; the ranks met at the head's worker's address
    assert {head.host, node1.host} == {"hA", "hB"}, (head, node1)
    assert (head.gang, head.rank, node1.rank) == (run_id, 0, 1)
    assert "rank 0 of 2 node 0 sum 3.0 at 127.0.0.1:" in logs, logs
    assert "rank 1 of 2 node 1 sum 3.0" in logs, logs
    port = int(logs.split("rank 0 of 2 node 0 sum 3.0 at 127.0.0.1:")[1].split()[0])
    assert PORT_FIRST <= port <= PORT_LAST
    assert "head only, node 0 of 1" in logs
    # both released at the end
    wait_until(
        lambda: all(
            (a := attempts.get(k)) is not None and a.state in states.ENDED
            for k in (head.key, node1.key)
        ),
        30,
        0.2,
    )


@pytest.mark.slow
def test_a_gang_without_two_hosts_waits_is_released_at_its_bound_and_forms_once_one_joins(
    pool: PoolSettings, workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch.distributed")
    monkeypatch.setenv("CORRAL_GANG_TIMEOUT", "6")
    _host(workers, "hA", tmp_path, slots=2)  # two free workers, one host
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    run_id = submit(write_spec(work, SPEC))
    store = Store.open()
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    controller = start_controller(tick=0.2)
    try:
        wait_until(lambda: store.events(run_id, types=["gang.incomplete"]), 90, 0.2)
        # node 1 was never run beside the head on host a: host a's free worker took it off
        # the queue and put it back, it waited there
        node1 = attempts.get(f"{run_id}-a1-k1")
        assert node1 is not None and not node1.worker, node1
        assert node1.received_at is not None, node1
        (released,) = store.events(run_id, types=["gang.incomplete"])[:1]
        assert "1 of 2 nodes ready" in released.reason, released.reason
        assert "CORRAL_GANG_TIMEOUT" in released.reason
        # what it had is released: the head's attempt ends, node 1's is cancelled
        wait_until(
            lambda: all(
                (a := attempts.get(k)) is not None and a.state in states.ENDED
                for k in (f"{run_id}-a1", f"{run_id}-a1-k1")
            ),
            30,
            0.2,
        )
        assert attempts.get(f"{run_id}-a1-k1").state == states.CANCELLED  # type: ignore[union-attr]
        _host(workers, "hB", tmp_path)  # a second host joins: the next gang forms
        run = wait_for(store, run_id, ENDED, timeout=180)
    finally:
        controller.terminate()
        controller.wait(10)
    logs = _logs(run_id, store)
    assert run.state == "SUCCEEDED", (run.reason, logs)
    assert "rank 1 of 2 node 1 sum 3.0" in logs
    # never two nodes of one attempt's gang on one host
    claimed = [a for a in (attempts.get(k) for k in _keys(attempts, run_id)) if a and a.host]
    by_attempt: dict[int, list[str]] = {}
    for a in claimed:
        by_attempt.setdefault(a.attempt, []).append(a.host)
    assert all(len(h) == len(set(h)) for h in by_attempt.values()), by_attempt
    assert sorted(by_attempt[max(by_attempt)]) == ["hA", "hB"]


def _keys(attempts: AttemptStore, run_id: str) -> list[str]:
    prefix = attempts.keys.attempt("")
    return [n[len(prefix) :] for n in attempts.r.scan_iter(match=f"{prefix}{run_id}-*")]


RESUMED_SPEC = """
name: gang-lost
resources: {nodes: 2, providers: [pool]}
env: {OMP_NUM_THREADS: 1}
run: torchrun --nproc-per-node 1 train.py
"""


@pytest.fixture
def slow_verdict_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolSettings]:
    """A pool that declares a silent worker lost only after 12 s: the survivors' ranks fail
    before (at once, as with the default 30 s; torchrun took 8 s to exit on a loaded 2-core
    machine, after a 6 s verdict: no silent node then)."""
    with scratch_pool(lost_after_s=12.0, outage_grace_s=12.0) as settings:
        for name, value in pool_env(settings).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("CORRAL_PROVIDERS", "pool")
        yield settings


@pytest.mark.slow
@pytest.mark.parametrize("lost", [1, 0], ids=["node-1-killed", "head-killed"])
def test_a_node_s_worker_killed_the_gang_is_repaired_with_the_weights_of_an_uninterrupted_run(
    lost: int, slow_verdict_pool: PoolSettings, tmp_path: Path
) -> None:
    pytest.importorskip("torch.distributed")
    pool = slow_verdict_pool
    workers = Workers(pool, tmp_path / "machines", fake_gpus="")
    try:
        _killed(lost, pool, workers, tmp_path)
    finally:
        workers.stop_all()


def _killed(lost: int, pool: PoolSettings, workers: Workers, tmp_path: Path) -> None:
    for host in ("hA", "hB", "hC"):
        _host(workers, host, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(SHARDED)
    run_id = submit(write_spec(work, RESUMED_SPEC))
    store = Store.open()
    attempts = AttemptStore(connect(pool), Keys(pool.name))
    controller = start_controller(tick=0.2)
    try:
        wait_until(
            lambda: [e for e in store.events(run_id, types=["checkpoint.saved"]) if e.attempt == 1],
            120,
            0.2,
            "a checkpoint of the first attempt",
        )
        gone = attempts.get(f"{run_id}-a1-k1" if lost else f"{run_id}-a1")
        assert gone is not None and gone.state == states.RUNNING
        workers.kill(gone.host)  # kill -9 of the node's machine: its worker, agent and rank
        run = wait_for(store, run_id, ENDED, timeout=240)
    finally:
        controller.terminate()
        controller.wait(10)
    logs = _logs(run_id, store)
    assert run.state == "SUCCEEDED", (run.reason, logs)
    # each element: sum over 40 steps of (1 + 2) * step, exactly as without the loss
    assert "final " + ",".join(["2460"] * 8) in logs, logs
    resumed = [ln for ln in logs.splitlines() if "rank 0 of 2 starts at step" in ln]
    assert resumed[0].endswith("starts at step 0") and not resumed[-1].endswith("step 0"), logs
    first, *_ = store.attempts(run_id)
    assert first.exit_reason == "preempted", first
    # the survivor's rank failed at once; its failure waited for the pool's verdict on the
    # silent node
    (silent,) = store.events(run_id, types=["gang.node_silent"])
    assert silent.data == {"nodes": [lost]}, silent
    # the repair: the survivor's worker kept (its agent took the next attempt), the lost
    # node replaced
    rows = {(r.attempt, r.data.get("rank")): r for r in store.resources(run_id=run_id)}
    survivor = 1 - lost
    assert rows[(2, survivor)].instance_id == rows[(1, survivor)].instance_id
    assert rows[(2, lost)].instance_id != rows[(1, lost)].instance_id
    (kept,) = store.events(run_id, types=["gang.node_kept"])
    assert kept.data["node"] == survivor
    assert store.events(run_id, types=["gang.handed_over"])
    # every attempt's nodes on distinct hosts, the lost host never again
    claimed = [a for a in (attempts.get(k) for k in _keys(attempts, run_id)) if a and a.host]
    by_attempt: dict[int, list[str]] = {}
    for a in claimed:
        by_attempt.setdefault(a.attempt, []).append(a.host)
    assert all(len(h) == len(set(h)) for h in by_attempt.values()), by_attempt
    assert gone.host not in by_attempt[max(by_attempt)], by_attempt
