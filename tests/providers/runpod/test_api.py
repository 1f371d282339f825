"""The RunPod API client on a mocked transport: the shapes RunPod answers in (bare and
wrapped lists, loose name filters, null or error for an unknown pod) and its errors."""

from __future__ import annotations

import json

import httpx
import pytest

from corral.errors import NoCapacity, NotFound, ProviderError, QuotaExceeded
from corral.providers.http import RetryPolicy
from corral.providers.runpod.api import RunPodAPI
from corral.providers.runpod.settings import RunPodSettings

KEY = "rpa_MOCKKEY0123456789abcdef"


def api(handler) -> RunPodAPI:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    settings = RunPodSettings(
        rest_url="https://rest.test/v1", graphql_url="https://gql.test/graphql", rate_per_s=None
    )
    return RunPodAPI(
        KEY, settings, client=client, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None
    )


def test_pod_lists_bare_or_wrapped_are_filtered_by_exact_name():
    pods = [
        {"id": "a", "name": "corral-k-a1"},
        {"id": "b", "name": "corral-k-a10"},
        {"name": "no-id"},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        assert request.headers["User-Agent"].startswith("corral/")
        assert request.url.params["name"] == "corral-k-a1"
        return httpx.Response(200, json=pods)  # a loose filter: a10 matched too

    assert [p.id for p in api(handler).list_pods(name="corral-k-a1")] == ["a"]
    assert [p.id for p in api(lambda r: httpx.Response(200, json={"pods": pods})).list_pods()] == [
        "a",
        "b",
    ]
    with pytest.raises(ProviderError, match="did not answer with a list"):
        api(lambda r: httpx.Response(200, json={"oops": 1})).list_pods()


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(404, json={"message": "pod not found"}),
        httpx.Response(400, json={"message": "pod not found"}),
        httpx.Response(200, json={}),
    ],
)
def test_an_unknown_pod_is_none(answer):
    assert api(lambda r: answer).get_pod("p123") is None


@pytest.mark.parametrize(
    "answer",
    [
        {"data": {"pod": None}},
        {"errors": [{"message": "pod not found", "extensions": {"code": "NOT_FOUND"}}]},
    ],
)
def test_graphql_answers_null_or_an_error_for_an_unknown_pod(answer):
    assert api(lambda r: httpx.Response(200, json=answer)).pod_runtime("p123") is None


def test_ids_that_could_change_the_request_are_refused_before_sending():
    sent = []
    client = api(lambda r: sent.append(r) or httpx.Response(200, json={}))
    for bad in ["../pods", "a b", 'x"}', ""]:
        assert client.get_pod(bad) is None  # no pod has such an id
        assert client.delete_pod(bad) is False
        with pytest.raises(NotFound):
            client.bid_resume(bad, 0.2, 1)
    assert sent == []


def test_graphql_errors_in_a_200_are_typed():
    def answer(message: str):
        return api(lambda r: httpx.Response(200, json={"errors": [{"message": message}]}))

    capacity = "There are no longer any instances available with the requested specifications."
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
    assert pod.id == "p1" and pod.interruptible
    assert seen["query"].startswith("mutation RentSpot { podRentInterruptable(input: {")
    assert KEY not in seen["url"] and KEY not in seen["query"]
