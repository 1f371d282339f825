"""The fake RunPod speaks REST v2 as its OpenAPI says (wrapped lists, problem details, 422 for
a body off the schema, 409 for an action the status does not allow, rate-limit headers, 429
past the quota), REST v1 is retired, and spot pods (GraphQL only) degrade: no spot price means
on-demand offers only, and a spot create RunPod refuses moves the controller to the next
offer."""

from __future__ import annotations

import httpx
import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.errors import NoCapacity, RateLimited
from corral.providers.base import Requirements
from corral.store import Store

from ..contract import new_key
from .fake_graphql import SPOT_GONE
from .fake_server import API_KEY
from .helpers import L40S, bootstrap, offer

AUTH = {"Authorization": f"Bearer {API_KEY}", "User-Agent": "corral-test/1"}


@pytest.fixture
def http(fake):
    with httpx.Client(base_url=fake.base_url, headers=AUTH, timeout=10) as client:
        yield client


def test_v2_errors_are_problem_documents_and_bodies_off_the_schema_are_422(http, fake):
    resp = http.get("/v2/pods/nope")
    assert resp.status_code == 404
    assert resp.headers["Content-Type"] == "application/problem+json"
    assert resp.json() == {"title": "Not Found", "status": 404, "detail": "pod not found"}
    body = {"name": "x", "image": "i", "gpu": {"id": "NVIDIA L40S"}, "bogus": 1}
    resp = http.post("/v2/pods", json=body)
    assert resp.status_code == 422
    assert resp.headers["Content-Type"] == "application/problem+json"
    assert any("'bogus' was unexpected" in e for e in resp.json()["errors"])
    resp = http.post("/v2/pods", json={"name": "x", "image": "i"})  # neither gpu nor cpu
    assert resp.status_code == 400 and "exactly one of gpu or cpu" in resp.json()["detail"]
    too_small = {"name": "v", "size": 5, "dataCenter": "EU-RO-1"}
    assert http.post("/v2/network-volumes", json=too_small).status_code == 422
    resp = http.get("/v2/catalog/gpus", params={"include": "AVAILABILITY"})  # no product
    assert resp.status_code == 400
    # the two bodies off the schema were refused by the published document, and recorded
    refused = fake.contract.violations
    assert len(refused) == 2 and "POST /v2/network-volumes" in refused[1]
    refused.clear()  # on purpose: the test sent them


def test_v2_lists_are_wrapped_and_actions_409_outside_their_status(http, fake):
    body = {"name": "p", "image": "i", "gpu": {"id": "NVIDIA L40S", "count": 1}}
    created = http.post("/v2/pods", json=body)
    assert created.status_code == 201 and created.json()["status"] == "PROVISIONING"
    pod_id = created.json()["id"]
    assert [p["id"] for p in http.get("/v2/pods").json()["pods"]] == [pod_id]
    assert http.post(f"/v2/pods/{pod_id}/action", json={"action": "start"}).status_code == 409
    stopped = http.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"})
    assert stopped.status_code == 200 and stopped.json()["status"] == "EXITED"
    assert stopped.json()["cost"] == 0.0 and stopped.json()["actions"] == ["start", "terminate"]
    assert http.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 409
    assert http.post(f"/v2/pods/{pod_id}/action", json={"action": "x"}).status_code == 422
    [refused] = fake.contract.violations
    assert "'x' is not one of" in refused
    fake.contract.violations.clear()  # on purpose: the test sent it
    assert http.delete(f"/v2/pods/{pod_id}").status_code == 204
    assert http.delete(f"/v2/pods/{pod_id}").status_code == 404
    vol = http.post("/v2/network-volumes", json={"name": "d", "size": 10, "dataCenter": "EU-RO-1"})
    assert vol.status_code == 201 and vol.json()["type"] == "STANDARD"
    assert http.get("/v2/network-volumes").json() == {"networkVolumes": [vol.json()]}


def test_v2_answers_carry_rate_limit_headers_and_429_past_the_quota(http, fake, make_provider):
    fake.rest.quota_per_minute = 3
    answers = [http.get("/v2/pods") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].headers["RateLimit-Policy"] == '"minute";q=3;w=60'
    assert answers[0].headers["RateLimit"].startswith('"minute";r=2;t=')
    assert int(answers[3].headers["Retry-After"]) > 0
    assert "rate limit exceeded" in answers[3].json()["detail"]
    with pytest.raises(RateLimited):  # the wait (up to 60 s) is over what the client waits
        make_provider().api.list_pods()


def test_v1_is_retired_and_nothing_corral_sends_goes_there(http, fake, make_provider, tmp_path):
    resp = http.get("/v1/pods")
    assert resp.status_code == 410 and "retired on 2026-11-15" in resp.json()["message"]
    fake.seen.clear()
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    p.stop(inst)
    p.start(inst)
    vol = p.create_volume("data", 10, "EU-RO-1")
    p.terminate(inst)
    p.delete_volume(vol["id"])
    routes = [s.route for s in fake.seen]
    assert "POST /v2/pods" in routes and f"DELETE /v2/pods/{inst.instance_id}" in routes
    assert not [r for r in routes if "/v1" in r]


def test_without_spot_prices_a_job_that_takes_either_kind_gets_on_demand_offers(
    make_provider, fake
):
    fake.cloud.spot_sold = False
    p = make_provider()
    offers = p.offers(L40S)
    assert offers and not [o for o in offers if o.spot]
    with pytest.raises(NoCapacity, match=r"no spot pods are sold now .*spot: auto"):
        p.offers(L40S.model_copy(update={"spot": True}))


def test_a_spot_create_runpod_refuses_is_no_capacity(make_provider, fake, tmp_path):
    p = make_provider()
    o = offer(p, spot=True)
    fake.cloud.spot_sold = False
    key = new_key()
    with pytest.raises(NoCapacity, match=rf"no spot pod for this offer .*{SPOT_GONE}"):
        p.launch(o, bootstrap(tmp_path, key), key)
    assert fake.cloud.list() == []


def test_the_controller_falls_back_to_on_demand_when_spot_creates_are_refused(
    make_provider, fake, tmp_path
):
    from control.helpers import submit, write_spec

    spec = write_spec(
        tmp_path,
        """
        name: fallback
        run: sleep 30
        resources: {gpus: "L40S:1", spot: auto, providers: [runpod]}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    p = make_provider()
    assert p.offers(Requirements(gpu_type="L40S", gpu_count_min=1))[0].spot  # spot is cheaper
    refused = {"errors": [{"message": SPOT_GONE, "extensions": {"code": "BAD_REQUEST"}}]}
    fake.fail("graphql:podRentInterruptable", 200, body=refused, times=100)
    controller = Controller(Context(store=store, providers={"runpod": p}, settings=Settings()))
    controller.tick()
    [pod] = fake.cloud.list()
    assert not pod.interruptible and store.get_run(run_id).state == "PROVISIONING"
    events = [e for e in store.events(run_id) if e.type == "provider.no_capacity"]
    assert events and "spot pods may no longer be sold" in events[0].reason
    store.request_action(run_id, "cancel")
    controller.tick()
    assert fake.cloud.list() == []
