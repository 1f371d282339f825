"""The controller's census on RunPod: every lone pod from one ``GET /v2/pods`` (checked against
the published document by the fake), read by the mapping ``status()`` uses; a pod gone from a
complete listing is gone without a request of its own; a failed listing falls back to each
pod's ``GET /v2/pods/{id}``."""

from __future__ import annotations

from corral.control.census import Census
from corral.providers.base import Instance, InstanceState
from corral.providers.runpod import RunPodProvider
from corral.providers.runpod.bootstrap import pod_name

from ..contract import check_listing_agrees_with_status, new_key
from .fake_server import FakeRunPod

#: the fake's GPU types, 16 pods each at most (a create takes the first with room)
GPUS = ["NVIDIA GeForce RTX 4090", "NVIDIA L40S", "NVIDIA A100-SXM4-80GB"]


def _pods(fake: FakeRunPod, provider: RunPodProvider, n: int, *, spot: bool) -> list[Instance]:
    """``n`` pods made at the fake directly (their containers never start: no process), each
    as corral's record of it."""
    fake.cloud.boot_delay = 3600.0
    out = []
    for _ in range(n):
        key = new_key()
        fake.cloud.create(
            name=pod_name(key),
            image="python:3.11",
            gpu_ids=GPUS,
            count=1,
            cloud="SECURE",
            interruptible=spot,
            env={},
            ports=["8000/http"],
            argv=[],
        )
        found = provider.find(key)
        assert found is not None
        offer = found.offer.model_copy(update={"spot": spot})
        out.append(found.model_copy(update={"offer": offer}))
    return out


def _list_calls(fake: FakeRunPod, before: int) -> tuple[int, int]:
    """(``GET /v2/pods`` requests, ``GET /v2/pods/{id}`` requests) since ``before``."""
    routes = [r for r in fake.routes()[before:] if r.startswith("GET /v2/pods")]
    listed = sum(r == "GET /v2/pods" for r in routes)
    return listed, len(routes) - listed


def test_the_listing_gives_each_pod_the_state_status_gives(make_provider, fake):
    provider = make_provider()
    running, exited = _pods(fake, provider, 2, spot=False)
    spot, gone = _pods(fake, provider, 2, spot=True)
    with fake.cloud.lock:
        fake.cloud.pods[running.instance_id].up = True
        fake.cloud.pods[spot.instance_id].up = True
    now = [0.0]
    census = Census(clock=lambda: now[0])
    machines = [running, exited, spot, gone]
    for i, inst in enumerate(machines):  # the first listing holds every pod
        assert census.status("runpod", provider, inst, f"r{i}", 5.0).state in (
            InstanceState.RUNNING,
            InstanceState.PROVISIONING,
        )
    fake.cloud.stop(exited.instance_id)  # stopped outside corral: FAILED
    fake.cloud.interrupt(spot.instance_id, notice=0.0)  # RunPod took the spot pod back
    fake.cloud.delete(gone.instance_id)
    now[0] += 5.0
    before = len(fake.routes())
    check_listing_agrees_with_status(
        census,
        provider,
        machines,
        lambda: _list_calls(fake, before),
        [
            InstanceState.RUNNING,
            InstanceState.FAILED,
            InstanceState.PREEMPTED,
            InstanceState.TERMINATED,
        ],
    )


def test_a_failed_listing_asks_each_pod_alone_and_never_makes_one_gone(make_provider, fake):
    provider = make_provider()
    machines = _pods(fake, provider, 3, spot=False)
    now = [0.0]
    census = Census(clock=lambda: now[0])
    for i, inst in enumerate(machines):
        census.status("runpod", provider, inst, f"r{i}", 5.0)
    fake.fail("GET /v2/pods", 500, times=10)  # past the client's retries
    now[0] += 5.0
    before = len(fake.routes())
    states = [census.status("runpod", provider, m, f"r{i}", 5.0) for i, m in enumerate(machines)]
    assert [st.state for st in states] == [InstanceState.PROVISIONING] * 3
    listed, alone = _list_calls(fake, before)
    assert listed >= 1 and alone == 3  # one failed listing (retried), then each pod alone
    assert census.listings == 2 and census.gone_from_listing == 0


def test_many_runs_looks_cost_one_listing_not_a_request_each(make_provider, fake):
    provider = make_provider()
    machines = _pods(fake, provider, 20, spot=False)
    census = Census(clock=lambda: 0.0)
    before = len(fake.routes())
    for i, inst in enumerate(machines):
        assert census.status("runpod", provider, inst, f"r{i}", 5.0).state == "PROVISIONING"
    assert _list_calls(fake, before) == (1, 0)
    before = len(fake.routes())
    for inst in machines:  # the same looks without the census: a request each
        provider.status(inst)
    assert _list_calls(fake, before) == (0, 20)
