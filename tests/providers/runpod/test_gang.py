"""RunPod's gangs: one Instant Cluster per gang attempt (``POST /v2/clusters``), the nodes its
pods by rank, each pod's place in the gang from RunPod's cluster variables, the cluster deleted
whole. Every exchange is checked against RunPod's published REST v2 document (the ``fake``
fixture fails the test on a violation)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from corral.control.agent_client import AgentClient
from corral.errors import (
    AgentError,
    BadInput,
    InfeasibleRequest,
    MaybeLaunched,
    NoCapacity,
    ProviderError,
)
from corral.providers.base import ImageRef, Instance, InstanceState, Requirements
from corral.providers.runpod.bootstrap import cluster_script
from corral.providers.runpod.gang import CLUSTER_ID
from corral.providers.runpod.settings import RunPodSettings
from corral.wire.gang import ENV_GANG_MASTER_ADDR, ENV_GANG_MASTER_PORT, ENV_GANG_RANK
from support.waiting import wait_until

from ..contract import new_key, wait_state
from .helpers import L40S, PORT, gang_bootstrap
from .helpers import offer as first_offer

GANG = L40S.model_copy(update={"nodes": 2})


def stage_line(inst: Instance, provider, token: str) -> str:
    """The first line node ``inst``'s stage printed, read from its agent through the proxy
    (told first that the gang is there, as the controller does once every node is ready)."""
    st = wait_state(provider, inst, InstanceState.RUNNING)

    def read() -> str | None:
        try:
            client = AgentClient(st.endpoint, token, timeout=2.0)
            client.start_gang()
            text = client.logs("train").data
        except AgentError:
            return None
        return text.splitlines()[0].split(" ", 1)[1] if text.strip() else None  # after its time

    return wait_until(read, timeout=60, message=f"node {inst.key}'s stage output")


def test_gang_offers_are_on_demand_secure_cloud_pods(make_provider):
    p = make_provider()
    offers = p.offers(GANG)
    assert offers and all(not o.spot and o.details["cloud_type"] == "SECURE" for o in offers)
    with pytest.raises(InfeasibleRequest, match="on-demand pods only"):
        p.offers(GANG.model_copy(update={"spot": True}))


def test_a_two_node_gang_is_one_cluster_whose_pods_are_the_nodes_by_rank(
    make_provider, fake, tmp_path
):
    p = make_provider(gang_port=PORT)
    key = new_key()
    o = first_offer(p, spot=False, req=GANG)
    head = p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    [body] = fake.rest.clusters.creates  # CreateClusterRequest, checked against the document
    assert body["name"] == f"corral-{key}" and body["type"] == "TRAINING"
    assert body["compute"] == {"gpuTypeId": "NVIDIA L40S", "gpuCountPerPod": 1, "podCount": 2}
    assert body["ports"] == ["8750/http"] and "registry" not in body and "cloud" not in body
    # one template for every pod: no rank and no address in its env, the gang's port is there
    env = body["env"]
    assert ENV_GANG_RANK not in env and ENV_GANG_MASTER_ADDR not in env
    assert env[ENV_GANG_MASTER_PORT] == str(PORT)
    script = json.loads(body["args"])["cmd"][0]
    assert f'export {ENV_GANG_RANK}="$NODE_RANK" {ENV_GANG_MASTER_ADDR}="$PRIMARY_ADDR"' in script

    addr = p.gang_address(head)
    member = f"{key}-k1"
    node = p.launch(o, gang_bootstrap(tmp_path, member, 1, addr=addr), member)
    assert len(fake.rest.clusters.creates) == 1  # the node is a pod of the head's cluster
    [cluster] = fake.cloud.clusters.values()
    assert [head.instance_id, node.instance_id] == cluster.pod_ids
    assert (head.data["cluster_rank"], node.data["cluster_rank"]) == (0, 1)
    assert head.data[CLUSTER_ID] == node.data[CLUSTER_ID] == cluster.id
    assert addr == cluster.ip(0) and node.endpoint != head.endpoint
    assert fake.routes("POST /v2/pods") == []  # no lone pod

    # each pod's agent took its place in the gang from RunPod's NODE_RANK and PRIMARY_ADDR
    token = "tok-same-for-the-attempt"
    assert stage_line(head, p, token) == f"rank=0 nodes=2 master={addr} port={PORT}"
    assert stage_line(node, p, token) == f"rank=1 nodes=2 master={addr} port={PORT}"


def test_each_nodes_key_is_idempotent(make_provider, fake, tmp_path):
    p = make_provider(gang_port=PORT)
    key = new_key()
    o = first_offer(p, spot=False, req=GANG)
    head = p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    again = make_provider(gang_port=PORT)  # a restarted controller
    assert again.launch(o, gang_bootstrap(tmp_path, key, 0), key).instance_id == head.instance_id
    member = f"{key}-k1"
    node = p.launch(o, gang_bootstrap(tmp_path, member, 1), member)
    assert again.launch(o, gang_bootstrap(tmp_path, member, 1), member).instance_id == (
        node.instance_id
    )
    assert len(fake.rest.clusters.creates) == 1 and len(fake.cloud.pods) == 2
    assert again.find(key).instance_id == head.instance_id
    assert again.find(member).instance_id == node.instance_id
    assert again.find(member).data[CLUSTER_ID] == head.data[CLUSTER_ID]
    listed = {i.key: i.instance_id for i in again.list_instances()}
    assert listed == {key: head.instance_id, member: node.instance_id}  # the leak sweep's view


def test_a_node_without_its_heads_cluster_is_refused(make_provider, fake, tmp_path):
    p = make_provider(gang_port=PORT)
    member = f"{new_key()}-k1"
    o = first_offer(p, spot=False, req=GANG)
    with pytest.raises(ProviderError, match="no Instant Cluster"):
        p.launch(o, gang_bootstrap(tmp_path, member, 1), member)
    with pytest.raises(BadInput, match="not node 1's key"):
        p.launch(o, gang_bootstrap(tmp_path, "r1-a1", 1), "r1-a1")
    assert fake.cloud.pods == {} and fake.rest.clusters.creates == []


def test_a_private_image_cannot_make_a_cluster(make_provider, fake, tmp_path):
    p = make_provider(gang_port=PORT)
    key = new_key()
    image = ImageRef(name="ghcr.io/me/private:1", username="me", password="pw-secret")
    with pytest.raises(BadInput, match="image_auth") as err:
        p.launch(
            first_offer(p, spot=False, req=GANG),
            gang_bootstrap(tmp_path, key, 0, image=image),
            key,
        )
    assert "pw-secret" not in str(err.value) and fake.cloud.pods == {}


def test_a_pod_not_placed_yet_is_looked_up_again(make_provider, fake, tmp_path, sleeps):
    fake.rest.clusters.place_ranks = False  # RunPod assigns ranks and addresses as it provisions
    p = make_provider(gang_port=PORT)
    key = new_key()
    o = first_offer(p, spot=False, req=GANG)
    with pytest.raises(MaybeLaunched, match="no pod of rank 0"):
        p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    [cluster] = fake.cloud.clusters.values()
    # a teardown or the leak sweep still finds the unplaced cluster by the head's key
    assert p.find(key).data[CLUSTER_ID] == cluster.id
    assert [i.key for i in p.list_instances()] == [key]
    fake.rest.clusters.place(cluster.id)
    head = p.launch(o, gang_bootstrap(tmp_path, key, 0), key)  # the same key: the same cluster
    assert head.instance_id == cluster.pod_ids[0] and len(fake.rest.clusters.creates) == 1
    p.terminate(head)  # the cluster's pods (their agents) go with it
    assert fake.cloud.pods == {}


def test_a_cluster_never_placed_is_deleted_after_the_place_timeout(make_provider, fake, tmp_path):
    fake.rest.clusters.place_ranks = False
    key = new_key()
    p = make_provider(gang_port=PORT)
    o = first_offer(p, spot=False, req=GANG)
    with pytest.raises(MaybeLaunched):
        p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    [cluster] = fake.cloud.clusters.values()
    time.sleep(0.05)
    late = make_provider(gang_port=PORT, place_timeout_s=0.01)
    with pytest.raises(NoCapacity, match="CORRAL_RUNPOD_PLACE_TIMEOUT_S"):
        late.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    assert fake.rest.clusters.deleted == [cluster.id] and fake.cloud.pods == {}


def test_terminating_any_node_deletes_the_whole_cluster(make_provider, fake, tmp_path):
    p = make_provider(gang_port=PORT)
    key = new_key()
    o = first_offer(p, spot=False, req=GANG)
    head = p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    member = f"{key}-k1"
    node = p.launch(o, gang_bootstrap(tmp_path, member, 1), member)
    wait_state(p, node, InstanceState.RUNNING)
    with pytest.raises(ProviderError, match="Instant Cluster"):  # not through the pod endpoints
        p.api.delete_pod(node.instance_id)
    p.terminate(node)
    assert fake.rest.clusters.deleted == [head.data[CLUSTER_ID]] and fake.cloud.pods == {}
    assert p.status(head).state == p.status(node).state == InstanceState.TERMINATED
    p.terminate(head)  # the others' terminate finds it gone
    p.terminate(node)
    assert (
        fake.routes("DELETE /v2/clusters/") == [f"DELETE /v2/clusters/{head.data[CLUSTER_ID]}"] * 3
    )
    assert p.list_instances() == [] and p.find(key) is None


def test_a_node_of_a_cluster_cannot_be_stopped(make_provider, tmp_path):
    p = make_provider(gang_port=PORT)
    key = new_key()
    head = p.launch(first_offer(p, spot=False, req=GANG), gang_bootstrap(tmp_path, key, 0), key)
    with pytest.raises(ProviderError, match="cannot be stopped"):
        p.stop(head)


def test_a_cluster_without_room_for_every_node_creates_nothing(make_provider, fake, tmp_path):
    p = make_provider(gang_port=PORT)
    key = new_key()
    big = Requirements(gpu_type="H100", gpu_count_min=8, gpu_count_max=8, nodes=2)
    o = first_offer(p, spot=False, req=big)  # 8 H100s in all: one pod's worth
    with pytest.raises(NoCapacity):
        p.launch(o, gang_bootstrap(tmp_path, key, 0), key)
    assert fake.cloud.pods == {} and fake.cloud.clusters == {}


def test_a_pod_without_runpods_cluster_variables_stops_with_one_line(tmp_path):
    script = cluster_script(RunPodSettings())
    done = subprocess.run(
        ["bash", "-c", script, "corral-boot"],
        env={"PATH": "/usr/bin:/bin", "PRIMARY_ADDR": "10.65.0.2"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "corral: this pod has no NODE_RANK or PRIMARY_ADDR: RunPod sets them on every pod of "
        "an Instant Cluster"
    )
