"""Conformance: every method of the RunPod provider, driven against the fake whose REST v2
half checks each exchange against RunPod's published document (``contracts/runpod-v2.json``),
breaks the contract zero times. The GraphQL half (spot pods, spot prices, on-demand pods with
host minimums) has no published schema: what the fake assumes there is listed in
docs/providers.md ("Assumptions no published contract settles", RunPod)."""

from __future__ import annotations

import httpx

from corral.providers.base import ImageRef, InstanceState, Requirements, VolumeRequest

from ..contract import new_key, wait_state
from .helpers import L40S, bootstrap, gang_bootstrap, offer

UA = {"User-Agent": "corral-test/1"}


def _agent_up(endpoint: str) -> bool:
    try:
        return httpx.get(endpoint + "/health", headers=UA, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_every_provider_method_keeps_the_published_rest_v2_contract(make_provider, fake, tmp_path):
    from support.waiting import wait_until

    p = make_provider()
    # offers: the v2 catalog per cloud, GraphQL's spot prices
    assert [o for o in p.offers(L40S) if o.spot] and [o for o in p.offers(L40S) if not o.spot]
    p.refresh_prices()

    # launch on-demand (REST v2) with a private image: registry credentials at /v2/registries
    key = new_key()
    image = ImageRef(name="ghcr.io/acme/trainer:1.4.0", username="bot", password="pw-0123456789")
    bs = bootstrap(tmp_path / "a", key).model_copy(update={"image": image})
    inst = p.launch(offer(p, spot=False), bs, key)
    assert p.launch(offer(p, spot=False), bs, key).instance_id == inst.instance_id  # idempotent
    wait_until(lambda: _agent_up(inst.endpoint or ""), timeout=60, message="the agent")
    assert wait_state(p, inst, InstanceState.RUNNING).endpoint

    # logs, find by key, list
    wait_until(lambda: p.logs(inst, tail=50) != "", timeout=30, message="a log line")
    assert p.find(key) is not None and p.find(key).instance_id == inst.instance_id  # type: ignore[union-attr]
    assert inst.instance_id in {i.instance_id for i in p.list_instances()}

    # stop / start
    p.stop(inst)
    assert wait_state(p, inst, InstanceState.STOPPED).state == InstanceState.STOPPED
    p.start(inst)
    wait_state(p, inst, InstanceState.RUNNING)

    # restart recovery: a new provider (a restarted controller) finds the pod by its key and
    # rebuilds the instance from what the pod carries
    again = make_provider()
    found = again.find(key)
    assert found is not None and found.instance_id == inst.instance_id
    assert found.offer.offer_id == inst.offer.offer_id
    assert again.status(found).state == InstanceState.RUNNING

    # launch spot (GraphQL), interrupted by RunPod, resumed with a bid
    spot_key = new_key()
    spot = p.launch(offer(p, spot=True), bootstrap(tmp_path / "b", spot_key), spot_key)
    wait_state(p, spot, InstanceState.RUNNING)
    fake.interrupt(spot.instance_id, notice=0.1)
    wait_state(p, spot, InstanceState.PREEMPTED)
    p.start(spot)
    wait_state(p, spot, InstanceState.RUNNING)

    # on-demand with host minimums (GraphQL podFindAndDeployOnDemand)
    big = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1, cpus=8, memory_gb=32)
    min_key = new_key()
    sized = p.launch(offer(p, spot=False, req=big), bootstrap(tmp_path / "c", min_key), min_key)

    # volumes: a named one created at launch, the settings' kind, list and remove
    vol_key = new_key()
    data = VolumeRequest(name="data", size_gb=20, mount="/data")
    vreq = Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1, volumes=[data])
    vol_inst = p.launch(offer(p, spot=False, req=vreq), bootstrap(tmp_path / "d", vol_key), vol_key)
    made = p.create_volume("ckpts", 10, "EU-RO-1")
    assert {v["id"] for v in p.volumes()} >= {made["id"]}
    assert {v.name for v in p.list_volumes()} >= {"data", "ckpts"}
    p.delete_volume(made["id"])

    # a gang: one Instant Cluster (create, list, its pods), each node found by its key
    gang_key = new_key()
    gang_req = L40S.model_copy(update={"nodes": 2, "spot": False})
    gang_offer = offer(p, spot=False, req=gang_req)
    head = p.launch(gang_offer, gang_bootstrap(tmp_path / "e", gang_key, 0), gang_key)
    member = f"{gang_key}-k1"
    addr = p.gang_address(head)
    node = p.launch(gang_offer, gang_bootstrap(tmp_path / "e", member, 1, addr=addr), member)
    assert wait_state(p, node, InstanceState.RUNNING).endpoint
    assert again.find(member).instance_id == node.instance_id  # type: ignore[union-attr]

    # terminate everything (a gang's node deletes its cluster whole); a second terminate of a
    # gone pod is success
    for i in (inst, spot, sized, vol_inst, node, head):
        p.terminate(i)
        assert p.status(i).state == InstanceState.TERMINATED
    p.terminate(inst)
    assert p.remove_volume("data")
    assert fake.cloud.list() == [] and p.list_instances() == []

    # zero violations, of many checked exchanges, and nothing under /v2 left unchecked
    fake.contract.assert_clean()
    assert fake.contract.checked > 50
    assert {"POST /v2/pods", "POST /v2/registries", "GET /v2/registries"} <= set(fake.routes())
    cluster = f"/v2/clusters/{head.data['cluster_id']}"
    assert {"POST /v2/clusters", "GET /v2/clusters", f"GET {cluster}/pods"} <= set(fake.routes())
    assert f"DELETE {cluster}" in fake.routes()
    assert "graphql:podFindAndDeployOnDemand" in fake.routes()
