"""Conformance: every call corral's IO.net provider makes, driven through the provider's own
methods against the fake bound to IO.net's published document
(``contracts/ionet-enterprise-caas.json``), breaks it zero times."""

from __future__ import annotations

import re
import uuid

from corral.providers.base import Bootstrap, InstanceState, Requirements
from support.waiting import wait_until

from ..contract import new_key, provider_plan, wait_state

H100 = Requirements(gpu_type="H100", gpu_count_min=1, gpu_count_max=1)

#: every operation of the document corral uses (PATCH, /node-pools and /containers-jobs are
#: not used)
USED = {
    "GET /hardware/max-gpus-per-container",
    "GET /available-replicas",
    "GET /price",
    "POST /deploy",
    "GET /deployments",
    "GET /deployment/{deployment_id}",
    "DELETE /deployment/{deployment_id}",
    "POST /deployment/{deployment_id}/extend",
    "GET /deployment/{deployment_id}/containers",
    "GET /deployment/{deployment_id}/log/{container_id}",
}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _operation(route: str) -> str:
    route = _UUID.sub("{deployment_id}", route)
    return re.sub(r"/log/[^/]+$", "/log/{container_id}", route)


def test_every_call_the_provider_makes_conforms_to_the_published_contract(
    make_provider, fake, tmp_path
):
    fake.log_hold_s = 1.0
    settings = {"duration_hours": 1, "extend_hours": 1, "extend_below_minutes": 90}
    provider = make_provider(log_read_s=0.5, **settings)
    # offers: hardware, replicas per location, a price estimate per location
    offers = provider.offers(H100)
    assert offers and all(o.price_per_hour > 0 for o in offers)
    # launch
    key = new_key()
    offer = next(o for o in offers if o.available)
    plan = provider_plan(provider, offer, tmp_path / "w", key, "sleep 60")
    inst = provider.launch(offer, Bootstrap(plan=plan, token="t-" + uuid.uuid4().hex), key)
    assert provider.launch(offer, Bootstrap(plan=plan, token="t2"), key).instance_id == (
        inst.instance_id
    )  # idempotent: found by name, not deployed twice
    # status until RUNNING (listing, details, containers); under 90 min left: extended
    st = wait_state(provider, inst, InstanceState.RUNNING)
    assert st.endpoint
    assert fake.deps[inst.instance_id].paid_minutes == 120
    # logs: the container's stream
    assert "corral agent" in wait_until(lambda: provider.logs(inst), timeout=15, message="log")
    # restart recovery: a new process with the same home finds, reads and lists the deployment
    restarted = make_provider(log_read_s=0.5, **settings)
    found = restarted.find(inst.key)
    assert found is not None and found.instance_id == inst.instance_id
    assert found.offer.offer_id == offer.offer_id  # the offer from the deployment's env
    assert restarted.status(found).state == InstanceState.RUNNING
    assert [i.instance_id for i in restarted.list_instances()] == [inst.instance_id]
    assert restarted.find(new_key()) is None
    # terminate (twice: idempotent), then the deployment is gone for the first process too
    restarted.terminate(found)
    restarted.terminate(found)
    assert provider.status(inst).state == InstanceState.TERMINATED
    assert restarted.sweep(set()) == []
    # every operation corral uses went through the contract, which saw no violation
    assert {_operation(r) for r in fake.routes()} == USED
    assert fake.contract.checked >= len(fake.routes())
    fake.contract.assert_clean()
