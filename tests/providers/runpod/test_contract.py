"""The provider contract against the fake RunPod server: on-demand pods (REST) and spot pods
(GraphQL), each running corral's agent for real behind the fake's proxy."""

from __future__ import annotations

import time

import pytest

from corral.providers.base import Requirements

from ..contract import ProviderContract


class TestRunPodOnDemandContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements(gpu_type="L40S", gpu_count_min=1, gpu_count_max=1, spot=False)

    def advance(self, provider) -> None:
        time.sleep(0.1)


class TestRunPodSpotContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements(gpu_count_min=2, gpu_count_max=2, spot=True)

    def advance(self, provider) -> None:
        time.sleep(0.1)


def test_an_agent_request_on_a_reused_port_is_no_api_exchange(fake):
    """A controller's request to an agent (it names its bell) that reaches the fake API's
    loopback port (another test's agent had it) is answered 404 and not counted against the
    provider; any other request outside the document still is."""
    import httpx

    stray = httpx.get(fake.base_url + "/poll", headers={"X-Corral-Bell": "127.0.0.1:9"})
    assert stray.status_code == 404 and list(fake.contract.violations) == []
    httpx.get(fake.base_url + "/poll")
    assert len(fake.contract.violations) == 1
    fake.contract.violations.clear()  # (the fixture's teardown checks every exchange)
