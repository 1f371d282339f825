"""Fixtures: a fake RunPod server on loopback and RunPod providers pointed at it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.providers.http import RetryPolicy
from corral.providers.runpod import RunPodProvider, RunPodSettings
from support.fakehttp import Sleeps

from .fake_server import API_KEY, FakeRunPod


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeRunPod]:
    server = FakeRunPod(tmp_path / "pods")
    yield server
    server.close()
    server.contract.assert_clean()  # every exchange kept RunPod's published REST v2 contract


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_provider(
    fake: FakeRunPod, corral_home: Path, sleeps: Sleeps
) -> Iterator[Callable[..., RunPodProvider]]:
    clients: list[httpx.Client] = []

    def make(*, timeout: float = 5.0, api_key: str = API_KEY, **settings) -> RunPodProvider:
        fields = {**fake.settings(), "rate_per_s": None, **settings}
        clients.append(httpx.Client())
        return RunPodProvider(
            api_key,
            settings=RunPodSettings(**fields),
            client=clients[-1],
            home=corral_home,
            retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, timeout=timeout),
            sleep=sleeps,
            # what the recorded sleeps would have taken, on top of the real time: a wait the
            # request budget asks for is over once slept (a fake sleep with the real clock
            # would leave the bucket waiting in a loop)
            clock=lambda: time.monotonic() + sum(sleeps.calls),
        )

    yield make
    for client in clients:
        client.close()
