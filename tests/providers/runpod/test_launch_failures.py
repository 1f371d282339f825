"""Launch and terminate against RunPod's known failures: a create that answers 500 (or times
out) after creating the pod, 5xx with no pod, 429 with Retry-After, no capacity, two pods
carrying one key, pods already gone; and a pod of another key is never touched."""

from __future__ import annotations

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.errors import NoCapacity, ProviderUnavailable
from corral.providers.base import Instance, InstanceState, Requirements
from corral.providers.runpod.bootstrap import pod_name
from corral.store import Store

from ..contract import new_key
from .helpers import bootstrap, offer


def test_create_answering_500_after_creating_the_pod_adopts_that_pod(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    fake.fail("POST /v2/pods", 500, after=True)
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    pods = fake.cloud.list(pod_name(key))
    assert [pod.id for pod in pods] == [inst.instance_id]
    assert fake.routes("POST /v2/pods") == ["POST /v2/pods"]  # no second create
    assert (
        p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key).instance_id
        == inst.instance_id
    )


def test_create_timing_out_after_creating_the_pod_adopts_that_pod(make_provider, fake, tmp_path):
    p = make_provider(timeout=0.3)
    key = new_key()
    fake.fail("POST /v2/pods", 201, after=True, delay=1.0)
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    assert [pod.id for pod in fake.cloud.list(pod_name(key))] == [inst.instance_id]
    assert len(fake.creates) == 1  # the timed-out answer is still on its way


def test_spot_create_answering_500_after_creating_the_pod_adopts_that_pod(
    make_provider, fake, tmp_path
):
    p = make_provider()
    key = new_key()
    fake.fail("graphql:podRentInterruptable", 500, after=True)
    inst = p.launch(offer(p, spot=True), bootstrap(tmp_path, key), key)
    pods = fake.cloud.list(pod_name(key))
    assert [pod.id for pod in pods] == [inst.instance_id] and pods[0].interruptible
    assert len(fake.routes("graphql:podRentInterruptable")) == 1


def test_create_failing_with_no_pod_looks_by_name_then_creates_again(
    make_provider, fake, tmp_path, sleeps
):
    p = make_provider()
    key = new_key()
    fake.fail("POST /v2/pods", 503)
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    assert [pod.id for pod in fake.cloud.list(pod_name(key))] == [inst.instance_id]
    pods_calls = [r for r in fake.routes() if r in ("GET /v2/pods", "POST /v2/pods")]
    assert pods_calls == ["GET /v2/pods", "POST /v2/pods", "GET /v2/pods", "POST /v2/pods"]
    assert 2.0 in sleeps.calls  # a backoff between the two creates


def test_create_failing_every_time_is_unavailable_and_leaves_no_pod(make_provider, fake, tmp_path):
    p = make_provider(create_attempts=3)
    key = new_key()
    fake.fail("POST /v2/pods", 500, times=10)
    with pytest.raises(ProviderUnavailable, match=r"could not create pod corral-.* in 3 tries"):
        p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    assert fake.cloud.list() == []
    assert len(fake.routes("POST /v2/pods")) == 3
    assert p.find(key) is None


def test_no_capacity_is_no_capacity_and_leaves_no_pod(make_provider, fake, tmp_path):
    p = make_provider()
    listed = offer(p, spot=False)
    fake.cloud.gpus["NVIDIA L40S"].capacity = {"SECURE": 0, "COMMUNITY": 0}
    key = new_key()
    with pytest.raises(NoCapacity, match="no longer any instances available"):
        p.launch(listed, bootstrap(tmp_path, key), key)
    assert fake.cloud.list() == []
    p.refresh_prices()
    assert all(not o.available for o in p.offers(listed_req(listed)))


def listed_req(o):
    from corral.providers.base import Requirements

    return Requirements(gpu_type=o.gpu_type, gpu_count_min=o.gpu_count, spot=o.spot)


def test_429_on_create_waits_its_retry_after_and_creates_one_pod(
    make_provider, fake, tmp_path, sleeps
):
    p = make_provider()
    key = new_key()
    fake.fail("POST /v2/pods", 429, retry_after=3)
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    assert [pod.id for pod in fake.cloud.list()] == [inst.instance_id]
    assert 3.0 in sleeps.calls


def test_429_on_status_waits_its_retry_after(make_provider, fake, tmp_path, sleeps):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    fake.fail("GET /v2/pods/*", 429, retry_after=2, times=2)
    assert p.status(inst).state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
    assert sleeps.calls.count(2.0) == 2


def test_two_pods_with_one_key_keep_one_and_terminate_the_other(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    o = offer(p, spot=False)
    for _ in range(2):  # as if two creates went through
        fake.cloud.create(
            name=pod_name(key),
            image="x",
            gpu_ids=[o.details["gpu_type_id"]],
            count=1,
            cloud=o.details["cloud_type"],
            interruptible=False,
            env={},
            ports=[],
            argv=[],
        )
    inst = p.launch(o, bootstrap(tmp_path, key), key)
    assert [pod.id for pod in fake.cloud.list(pod_name(key))] == [inst.instance_id]
    assert not fake.routes("POST /v2/pods")


def test_a_restarted_controller_finds_and_adopts_the_pod(make_provider, fake, tmp_path):
    key = new_key()
    first = make_provider()
    inst = first.launch(offer(first, spot=True), bootstrap(tmp_path, key), key)
    again = make_provider()  # a new provider object: nothing in memory
    found = again.find(key)
    assert found is not None and found.instance_id == inst.instance_id
    assert found.offer == inst.offer  # the offer travels in the pod's env
    assert again.launch(inst.offer, bootstrap(tmp_path, key), key).instance_id == inst.instance_id
    assert [i.instance_id for i in again.list_instances()] == [inst.instance_id]


def test_terminate_of_a_pod_already_deleted_succeeds(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    fake.cloud.delete(inst.instance_id)
    p.terminate(inst)
    assert p.status(inst).state == InstanceState.TERMINATED
    assert p.api.delete_pod(inst.instance_id) is False  # 404 "pod not found"


def test_terminate_removes_every_pod_named_for_the_key(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    o = offer(p, spot=False)
    inst = p.launch(o, bootstrap(tmp_path, key), key)
    fake.cloud.create(
        name=pod_name(key),
        image="x",
        gpu_ids=[o.details["gpu_type_id"]],
        count=1,
        cloud=o.details["cloud_type"],
        interruptible=False,
        env={},
        ports=[],
        argv=[],
    )
    p.terminate(inst)
    assert fake.cloud.list() == []


def test_a_pod_of_another_key_is_never_terminated(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    stranger = Instance(
        provider="runpod", instance_id=inst.instance_id, key=new_key(), offer=inst.offer
    )
    assert p.status(stranger).state == InstanceState.TERMINATED
    p.terminate(stranger)
    assert [pod.id for pod in fake.cloud.list()] == [inst.instance_id]


def test_no_balance_stops_runpods_offers_for_the_launch_in_one_line(make_provider, fake, tmp_path):
    from control.helpers import submit, write_spec

    from .fake_rest_v2 import problem

    spec = write_spec(
        tmp_path,
        """
        name: broke
        run: sleep 30
        resources: {gpus: "L40S:1", spot: false, providers: [runpod]}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    p = make_provider()
    assert len(p.offers(Requirements(gpu_type="L40S", gpu_count_min=1, spot=False))) > 1
    fake.fail("POST /v2/pods", 402, body=problem(402, "insufficient balance"), times=100)
    controller = Controller(Context(store=store, providers={"runpod": p}, settings=Settings()))
    controller.tick()
    assert fake.routes("POST /v2/pods") == ["POST /v2/pods"]  # one try, not one per offer
    [error] = [e for e in store.events(run_id) if e.type == "provider.error"]
    assert "HTTP 402" in error.reason and "no other RunPod offer is tried" in error.reason
    assert "\n" not in error.reason and error.data["code"] == "no_balance"
    run = store.get_run(run_id)
    assert run.state == "PENDING" and "runpod: no balance" in (run.reason or "")
