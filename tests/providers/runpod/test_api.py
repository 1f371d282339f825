"""The RunPod API client on a mocked transport: REST v2's shapes (wrapped lists, no name
filter, lifecycle actions with 409, problem details) and GraphQL's for spot pods."""

from __future__ import annotations

import json

import httpx
import pytest

from corral.errors import (
    AuthFailed,
    BadInput,
    NoBalance,
    NoCapacity,
    NotFound,
    ProviderError,
    QuotaExceeded,
)
from corral.providers.http import RetryPolicy
from corral.providers.runpod.api import RunPodAPI
from corral.providers.runpod.settings import RunPodSettings

KEY = "rpa_MOCKKEY0123456789abcdef"


def api(handler) -> RunPodAPI:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    settings = RunPodSettings(
        rest_url="https://rest.test/v2", graphql_url="https://gql.test/graphql", rate_per_s=None
    )
    return RunPodAPI(
        KEY, settings, client=client, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None
    )


def problem(status: int, detail: str) -> httpx.Response:
    body = {"title": "x", "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"Content-Type": "application/problem+json"})


def test_a_v1_base_url_is_refused_with_the_retirement_date():
    with pytest.raises(ValueError, match="retired REST v1 on 2026-11-15"):
        RunPodSettings(rest_url="https://rest.runpod.io/v1")
    with pytest.raises(BadInput, match=r"CORRAL_RUNPOD_REST_URL: .*retired REST v1"):
        RunPodSettings.from_env({"CORRAL_RUNPOD_REST_URL": "https://rest.runpod.io/v1/"})
    assert RunPodSettings().rest_url == "https://api.runpod.io/v2"


def test_pod_lists_come_wrapped_and_are_filtered_by_exact_name_here():
    pods = [
        {"id": "a", "name": "corral-k-a1", "status": "RUNNING"},
        {"id": "b", "name": "corral-k-a10", "status": "EXITED"},
        {"name": "no-id"},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v2/pods"
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        assert request.headers["User-Agent"].startswith("corral/")
        assert "name" not in request.url.params  # v2 has no name filter
        return httpx.Response(200, json={"pods": pods})

    assert [p.id for p in api(handler).list_pods(name="corral-k-a1")] == ["a"]
    assert [p.state_word for p in api(handler).list_pods()] == ["RUNNING", "EXITED"]
    for wrong in ([], {"oops": 1}, {"pods": None}):
        with pytest.raises(ProviderError, match="did not answer with a list"):
            api(lambda r, w=wrong: httpx.Response(200, json=w)).list_pods()


@pytest.mark.parametrize("answer", [problem(404, "pod not found"), httpx.Response(200, json={})])
def test_an_unknown_pod_is_none(answer):
    assert api(lambda r: answer).get_pod("p123") is None


def test_stop_and_start_are_actions_and_a_409_is_fine_when_already_there():
    calls: list[tuple[str, str, dict | None]] = []
    state = {"status": "EXITED"}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        calls.append((request.method, request.url.path, body))
        if request.method == "GET":
            return httpx.Response(200, json={"id": "p1", **state})
        if body == {"action": "stop"} and state["status"] == "EXITED":
            return problem(409, "action 'stop' is not valid for a pod in status EXITED")
        if body == {"action": "start"} and state["status"] == "EXITED":
            return problem(409, "action 'start' is not valid for a pod in status EXITED")
        return httpx.Response(200, json={"id": "p1", **state})

    client = api(handler)
    client.stop_pod("p1")  # already stopped
    assert calls[:2] == [
        ("POST", "/v2/pods/p1/action", {"action": "stop"}),
        ("GET", "/v2/pods/p1", None),
    ]
    with pytest.raises(ProviderError, match="cannot start pod p1 while it is EXITED"):
        client.start_pod("p1")  # a 409 that leaves it where it was is an error
    state["status"] = "RUNNING"
    calls.clear()
    client.start_pod("p1")
    assert calls == [("POST", "/v2/pods/p1/action", {"action": "start"})]


def test_network_volumes_speak_v2_names():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            seen["body"] = json.loads(request.content)
            return httpx.Response(
                201,
                json={"id": "v1", "name": "data", "size": 20, "dataCenter": "EU-RO-1", "type": "X"},
            )
        if request.url.path == "/v2/network-volumes":
            return httpx.Response(200, json={"networkVolumes": [{"id": "v1", "dataCenter": "D"}]})
        return problem(404, "network volume not found")

    client = api(handler)
    vol = client.create_volume("data", 20, "EU-RO-1")
    assert seen["body"] == {"name": "data", "size": 20, "dataCenter": "EU-RO-1"}
    assert (vol.id, vol.data_center) == ("v1", "EU-RO-1")
    assert [v.data_center for v in client.list_volumes()] == ["D"]
    assert client.get_volume("v9") is None and client.delete_volume("v9") is False


def test_ids_that_could_change_the_request_are_refused_before_sending():
    sent = []
    client = api(lambda r: sent.append(r) or httpx.Response(200, json={}))
    for bad in ["../pods", "a b", 'x"}', ""]:
        assert client.get_pod(bad) is None  # no pod has such an id
        assert client.delete_pod(bad) is False
        with pytest.raises(NotFound):
            client.bid_resume(bad, 0.2, 1)
        with pytest.raises(NotFound):
            client.stop_pod(bad)
    assert sent == []


def test_problem_details_and_graphql_errors_are_typed():
    capacity = "There are no longer any instances available with the requested specifications."
    with pytest.raises(NoCapacity, match="HTTP 400: There are no longer"):
        api(lambda r: problem(400, capacity)).create_pod({"name": "x"})
    with pytest.raises(QuotaExceeded):
        api(lambda r: problem(402, "insufficient balance")).create_pod({"name": "x"})

    def answer(message: str):
        return api(lambda r: httpx.Response(200, json={"errors": [{"message": message}]}))

    with pytest.raises(NoCapacity):
        answer(capacity).rent_interruptable({"name": "x"})
    with pytest.raises(QuotaExceeded):
        answer("Insufficient balance to rent this pod").rent_interruptable({"name": "x"})


def test_spot_create_sends_an_inline_mutation_with_the_key_in_the_header_only():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["url"] = str(request.url)
        seen["query"] = json.loads(request.content)["query"]
        return httpx.Response(
            200, json={"data": {"podRentInterruptable": {"id": "p1", "desiredStatus": "RUNNING"}}}
        )

    pod = api(handler).rent_interruptable({"name": "corral-k", "gpuCount": 1})
    assert pod.id == "p1" and pod.state_word == "RUNNING"
    assert seen["query"].startswith("mutation RentSpot { podRentInterruptable(input: {")
    assert KEY not in seen["url"] and KEY not in seen["query"]


def test_a_402_on_create_is_no_balance_in_one_line():
    for create in (
        lambda: api(lambda r: problem(402, "insufficient balance")).create_pod({"name": "x"}),
        lambda: api(
            lambda r: httpx.Response(
                200, json={"errors": [{"message": "Insufficient balance to rent this pod"}]}
            )
        ).rent_interruptable({"name": "x"}),
    ):
        with pytest.raises(NoBalance) as caught:
            create()
        assert "\n" not in caught.value.message and KEY not in caught.value.message
        assert "no other RunPod offer is tried" in caught.value.message


def test_409_reads_as_what_it_means_on_each_endpoint():
    """The document defines 409 for a pod action (the status does not allow it: handled by
    the action), for DELETE /v2/pods/{id} (a cluster member pod) and for nothing on
    POST /v2/pods: none of them is "no capacity"."""
    cluster = api(lambda r: problem(409, "pod belongs to a cluster"))
    with pytest.raises(ProviderError, match="belongs to an Instant Cluster") as caught:
        cluster.delete_pod("p1")
    assert not isinstance(caught.value, NoCapacity)
    with pytest.raises(ProviderError) as created:
        api(lambda r: problem(409, "conflict")).create_pod({"name": "x"})
    assert not isinstance(created.value, NoCapacity)
    with pytest.raises(ProviderError, match="cannot use this GPU pool") as pool:
        api(lambda r: problem(403, "access denied")).create_pod({"name": "x"})
    assert not isinstance(pool.value, AuthFailed)  # the next offer may do
    capacity = "There are no longer any instances available with the requested specifications."
    with pytest.raises(NoCapacity):
        api(lambda r: problem(400, capacity)).create_pod({"name": "x"})
