"""A multi-node job on RunPod under corral's controller: its gang is one Instant Cluster, each
node's stage runs with its rank and the head's cluster address, and the cluster is deleted at
the end; a gang whose cluster never places its pods within the bound is released whole."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.store import Store
from support.gang_jobs import ALL_REDUCE as TRAIN

SPEC = """
name: gang
resources: {gpus: "L40S:1", nodes: 2, spot: false, providers: [runpod]}
stages:
  - name: hello
    run: echo "node $CORRAL_NODE_RANK of $CORRAL_NUM_NODES meets $CORRAL_MASTER_ADDR"
    nodes: all
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tick_until(controller: Controller, done, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.tick()
        got = done()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_two_node_job_runs_on_one_cluster_and_deletes_it(
    make_provider, fake, tmp_path, corral_home: Path
):
    from control.helpers import submit, write_spec

    run_id = submit(write_spec(tmp_path, SPEC))
    store = Store.open()
    provider = make_provider(gang_port=_free_port())
    ctx = Context(store=store, providers={"runpod": provider}, settings=Settings(intent_grace_s=0))
    run = _tick_until(
        Controller(ctx),
        lambda: (r := store.get_run(run_id)).state in ("SUCCEEDED", "FAILED") and r,
    )
    assert run.state == "SUCCEEDED", run.reason
    [body] = fake.rest.clusters.creates
    assert body["compute"]["podCount"] == 2 and fake.routes("POST /v2/pods") == []
    assert len(fake.rest.clusters.deleted) == 1
    assert fake.cloud.pods == {} and store.resources(run_id=run_id, open_only=True) == []
    head = [a for a in store.attempts(run_id)][-1]
    assert head.exit_reason == "succeeded"
    # every node's stage log (the other nodes' copied beside the head's) says its place
    lines = sorted(
        line.split(" ", 1)[-1]
        for path in corral_home.rglob("*hello*")
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
        if "meets" in line
    )
    assert len(lines) >= 2 and lines[0].startswith("node 0 of 2 meets 127.0."), lines
    assert any(line.startswith("node 1 of 2 meets 127.0.") for line in lines), lines
    assert len({line.rsplit(" ", 1)[-1] for line in lines}) == 1  # one head address for all


def test_a_cluster_that_never_places_its_pods_is_released_whole(make_provider, fake, tmp_path):
    from control.helpers import submit, write_spec

    fake.rest.clusters.place_ranks = False  # RunPod places the head only, never node 1
    run_id = submit(write_spec(tmp_path, SPEC))
    store = Store.open()
    provider = make_provider(gang_port=_free_port())
    settings = Settings(intent_grace_s=0, gang_timeout_s=5.0)
    controller = Controller(Context(store=store, providers={"runpod": provider}, settings=settings))

    def head_placed() -> bool:
        for cluster in list(fake.cloud.clusters.values()):
            fake.rest.clusters.place(cluster.id, {0})
        return bool(fake.cloud.clusters)

    _tick_until(controller, head_placed, timeout=30)
    _tick_until(
        controller,
        lambda: any(a.exit_reason == "gang_incomplete" for a in store.attempts(run_id)),
        timeout=60,
    )
    _tick_until(controller, lambda: fake.rest.clusters.deleted, timeout=30)
    assert fake.cloud.clusters == {} and fake.cloud.pods == {}
    (said,) = store.events(run_id, types=["gang.incomplete"])
    assert "1 of 2 nodes ready" in said.reason, said.reason
    assert "could not form" in (store.get_run(run_id).reason or "")
    store.request_action(run_id, "cancel")
    _tick_until(controller, lambda: store.get_run(run_id).state == "CANCELLED", timeout=30)
    assert store.resources(run_id=run_id, open_only=True) == []
    assert len(fake.rest.clusters.creates) == 1  # the next gang waits (10 s, then doubled)


def test_a_head_never_placed_gives_its_cluster_up_after_the_place_timeout(
    make_provider, fake, tmp_path
):
    from control.helpers import submit, write_spec

    fake.rest.clusters.place_ranks = False  # RunPod never places any pod
    run_id = submit(write_spec(tmp_path, SPEC))
    store = Store.open()
    provider = make_provider(gang_port=_free_port(), place_timeout_s=1.0)
    settings = Settings(intent_grace_s=0)
    controller = Controller(Context(store=store, providers={"runpod": provider}, settings=settings))
    _tick_until(controller, lambda: fake.rest.clusters.deleted, timeout=30)
    said = [e.reason for e in store.events(run_id, types=["provider.no_capacity"])]
    assert any("CORRAL_RUNPOD_PLACE_TIMEOUT_S" in r for r in said), said
    store.request_action(run_id, "cancel")
    _tick_until(controller, lambda: store.get_run(run_id).state == "CANCELLED", timeout=30)
    _tick_until(controller, lambda: not fake.cloud.clusters, timeout=30)
    assert fake.cloud.pods == {} and store.resources(run_id=run_id, open_only=True) == []


TORCHRUN = """
name: torchgang
resources: {gpus: "L40S:1", nodes: 2, spot: false, providers: [runpod]}
env: {OMP_NUM_THREADS: 1}
stages:
  - name: train
    run: torchrun --nproc-per-node 1 train.py
    nodes: all
"""


@pytest.mark.slow
def test_an_unmodified_torchrun_meets_across_the_clusters_two_pods(
    make_provider, fake, tmp_path, corral_home: Path
):
    pytest.importorskip("torch.distributed")
    from control.helpers import submit, write_spec

    (tmp_path / "train.py").write_text(TRAIN)
    run_id = submit(write_spec(tmp_path, TORCHRUN))
    store = Store.open()
    provider = make_provider(gang_port=_free_port())
    ctx = Context(store=store, providers={"runpod": provider}, settings=Settings(intent_grace_s=0))
    run = _tick_until(
        Controller(ctx),
        lambda: (r := store.get_run(run_id)).state in ("SUCCEEDED", "FAILED") and r,
        timeout=180,
    )
    logs = "\n".join(
        p.read_text(errors="replace") for p in corral_home.rglob("*train*") if p.is_file()
    )
    assert run.state == "SUCCEEDED", (run.reason, logs)
    # RunPod's NODE_RANK reaches the stage (torchrun keeps it); world of 2, 1 + 2 summed
    assert "rank 0 of 2 node 0 sum 3.0" in logs and "rank 1 of 2 node 1 sum 3.0" in logs, logs
    assert fake.cloud.pods == {} and len(fake.rest.clusters.deleted) == 1
