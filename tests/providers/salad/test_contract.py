"""The Salad provider against SaladCloud's published documents.

* The conformance test drives every method of the provider (offers, a price refresh, launch at
  a spot priority, at the on-demand one from a private image with its registry credentials,
  and without a GPU, an adopted relaunch, status, find, list, stop/start, logs, system logs,
  simulated preemption, a restarted controller's reading, terminate, the leak sweep) and the
  node's side (the agent's node hook and the boot's shutdown command, against the metadata
  service; SaladCloud has no volumes) on the fake SaladCloud, which checks every
  exchange against ``contracts/salad-cloud.yaml`` and ``contracts/salad-cloud-imds.yaml``:
  zero violations, and every operation corral uses was exercised.
* A request the real API would refuse is refused the way SaladCloud does and fails the test.
* The provider contract (``tests/providers/contract.py``): GPU and CPU container groups, each
  running corral's agent for real behind the fake's container gateway.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from corral.errors import ProviderError
from corral.providers.base import ImageRef, InstanceState, Requirements
from corral.providers.salad import boot
from corral.providers.salad.bootstrap import group_name
from support.waiting import wait_until

from ..contract import ProviderContract, new_key, wait_state
from .helpers import RTX3090, bootstrap, offer
from .test_api import BODY

_GROUPS = r"/organizations/[^/]+/projects/[^/]+/containers"
#: the operations of SaladCloud's documents that corral calls, by the route the fake saw
OPERATIONS = {
    "list_gpu_classes": r"GET /organizations/[^/]+/gpu-classes",
    "query_log_entries": r"POST /organizations/[^/]+/log-entries",
    "list_container_groups": rf"GET {_GROUPS}",
    "create_container_group": rf"POST {_GROUPS}",
    "get_container_group": rf"GET {_GROUPS}/[^/]+",
    "delete_container_group": rf"DELETE {_GROUPS}/[^/]+",
    "start_container_group": rf"POST {_GROUPS}/[^/]+/start",
    "stop_container_group": rf"POST {_GROUPS}/[^/]+/stop",
    "list_container_group_instances": rf"GET {_GROUPS}/[^/]+/instances",
    "reallocate_container_group_instance": rf"POST {_GROUPS}/[^/]+/instances/[^/]+/reallocate",
    "imds get_status": r"imds GET /v1/status",
    "imds replace_deletion_cost": r"imds PUT /v1/deletion-cost",
}


def _exercised(fake) -> set[str]:
    routes = {s.route for s in fake.seen if s.status < 400}
    return {
        op for op, pattern in OPERATIONS.items() if any(re.fullmatch(pattern, r) for r in routes)
    }


def test_every_method_speaks_saladclouds_published_api(make_provider, fake, tmp_path):
    provider = make_provider(sweep_min_age_s=0)
    # offers: every priority of a GPU class, a CPU offer, a refresh of the prices
    gpu_offers = provider.offers(RTX3090)
    assert {o.details["priority"] for o in gpu_offers} == {"high", "medium", "low", "batch"}
    [cpu_offer] = provider.offers(Requirements(cpus=2, memory_gb=4))
    assert provider.refresh_prices()
    # launch: spot (batch), on-demand (high), CPU only; the same key again adopts
    chosen = {
        "spot": offer(provider, priority="batch"),
        "ondemand": offer(provider, priority="high"),
    }
    chosen["cpu"] = cpu_offer
    keys = {kind: new_key() for kind in chosen}
    boots = {
        kind: bootstrap(provider, o, tmp_path / kind, keys[kind]) for kind, o in chosen.items()
    }
    # the on-demand one from a private image: its registry credentials go with the create
    private = ImageRef(name="ghcr.io/acme/train:2", username="acme", password="ghp_secret-123456")
    boots["ondemand"] = boots["ondemand"].model_copy(update={"image": private})
    insts = {kind: provider.launch(o, boots[kind], keys[kind]) for kind, o in chosen.items()}
    assert [c["container"].get("registry_authentication") for c in fake.creates] == [
        None,
        {"basic": {"username": "acme", "password": "ghp_secret-123456"}},
        None,
    ]
    again = provider.launch(
        chosen["spot"],
        bootstrap(provider, chosen["spot"], tmp_path / "spot", keys["spot"]),
        keys["spot"],
    )
    assert again.instance_id == insts["spot"].instance_id
    for inst in insts.values():
        st = wait_state(provider, inst, InstanceState.RUNNING)
        url = f"{st.endpoint}/health"  # the agent, through the container gateway
        wait_until(lambda u=url: httpx.get(u).status_code == 200, message=url)
    # find by key, list for the sweep
    for kind, key in keys.items():
        found = provider.find(key)
        assert found is not None and found.instance_id == insts[kind].instance_id
    assert {i.key for i in provider.list_instances()} == set(keys.values())
    # the node's side: the agent's node hook sets the deletion cost through the metadata
    # service and reads its status; the boot's shutdown command sets it back to 0
    spot = insts["spot"].instance_id
    wait_until(lambda: fake.cloud.groups[spot].deletion_costs[:1] == [100000])
    assert (
        boot.shutdown(
            {
                "CORRAL_SALAD_IMDS_URL": f"{fake.base_url}/imds/{spot}",
                "SALAD_CONTAINER_GROUP_NAME": spot,
            }
        )
        == 0
    )
    assert fake.cloud.groups[spot].deletion_costs[-1] == 0
    # stop / start
    provider.stop(insts["ondemand"])
    wait_state(provider, insts["ondemand"], InstanceState.STOPPED)
    provider.start(insts["ondemand"])
    wait_state(provider, insts["ondemand"], InstanceState.RUNNING)
    # logs: the log service (corral reads no system events: SaladAPI.system_logs had no caller)
    wait_until(lambda: provider.logs(insts["spot"], tail=50) is not None)
    # a simulated preemption, then a restarted controller's reading of every group
    provider.preempt(insts["spot"])
    wait_state(provider, insts["spot"], InstanceState.PREEMPTED)
    restarted = make_provider()
    assert restarted.status(insts["spot"]).state == InstanceState.PREEMPTED
    recovered = restarted.find(keys["ondemand"])
    assert recovered is not None and recovered.offer.details["priority"] == "high"
    assert recovered.offer.spot is False
    # terminate two; the sweep deletes the third, which no run knows any more
    for kind in ("spot", "ondemand"):
        restarted.terminate(insts[kind])
        assert restarted.status(insts[kind]).state == InstanceState.TERMINATED
    assert provider.sweep(set()) == [insts["cpu"].instance_id]
    assert fake.cloud.groups == {}
    # every exchange kept to SaladCloud's documents, and every operation was one of them
    assert fake.violations() == []
    assert fake.contract.checked > 50 and fake.imds_contract.checked >= 4
    assert _exercised(fake) == set(OPERATIONS)


def test_a_request_saladcloud_would_refuse_is_refused_so_and_fails_the_test(make_provider, fake):
    provider = make_provider()
    body = {**BODY, "container": {**BODY["container"], "environment_variables": {"S": "a\nb"}}}
    with pytest.raises(ProviderError, match=r"HTTP 400.*environment_variables/S"):
        provider.api.create_group(body)
    assert fake.cloud.groups == {}  # it never reached the fake cloud
    missing = httpx.get(f"{fake.base_url}/imds/{group_name('k1-a1')}/v1/status")  # no Metadata
    assert missing.status_code == 400
    assert len(fake.violations()) == 2
    with pytest.raises(AssertionError, match=r"broke salad-cloud\.yaml"):
        fake.assert_clean()
    fake.contract.violations.clear()
    with pytest.raises(AssertionError, match=r"broke salad-cloud-imds\.yaml"):
        fake.assert_clean()
    fake.imds_contract.violations.clear()  # seen: the fixture's own check passes
    # the metadata service's own errors keep to its document (application/problem+json)
    gone = httpx.get(
        f"{fake.base_url}/imds/{group_name('k1-a1')}/v1/status", headers={"Metadata": "true"}
    )
    assert gone.status_code == 404 and gone.json()["code"] == "container-not-found"
    assert fake.violations() == []


class TestSaladGpuContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements(gpu_type="RTX3090", gpu_count_min=1, gpu_count_max=1, spot=True)

    def advance(self, provider) -> None:
        time.sleep(0.1)


class TestSaladCpuContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    def advance(self, provider) -> None:
        time.sleep(0.1)
