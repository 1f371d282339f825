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
