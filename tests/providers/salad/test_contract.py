"""The provider contract against the fake SaladCloud: GPU and CPU container groups, each
running corral's agent for real behind the fake's container gateway."""

from __future__ import annotations

import time

import pytest

from corral.providers.base import Requirements

from ..contract import ProviderContract


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
