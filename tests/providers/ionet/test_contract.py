"""The provider contract against the fake IO.net: deployments whose one container runs
corral's agent for real, reached at the container's public URL."""

from __future__ import annotations

import time

import pytest

from corral.providers.base import Requirements

from ..contract import ProviderContract


class TestIonetContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return Requirements(gpu_type="H100", gpu_count_min=1, gpu_count_max=1)

    def advance(self, provider) -> None:
        time.sleep(0.1)
