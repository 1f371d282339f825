"""Fixtures: a fake IO.net on loopback, bound to IO.net's published contract, and IO.net
providers pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.ionet import IonetProvider, IonetSettings

from .fake_server import API_KEY, FakeIonet


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeIonet]:
    """The fake IO.net; the test fails at teardown if any exchange broke the published
    contract (``contracts/ionet-enterprise-caas.json``)."""
    server = FakeIonet(tmp_path / "ionet")
    try:
        yield server
    finally:
        server.close()
    server.contract.assert_clean()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_provider(
    fake: FakeIonet, corral_home: Path, sleeps: list[float]
) -> Iterator[Callable[..., IonetProvider]]:
    clients: list[httpx.Client] = []

    def make(*, api_key: str = API_KEY, **settings) -> IonetProvider:
        fields = {**fake.settings(), "list_cache_s": 0.2, "containers_cache_s": 0.3, **settings}
        clients.append(httpx.Client())
        return IonetProvider(
            api_key,
            settings=IonetSettings(**fields),
            client=clients[-1],
            home=corral_home,
            retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, timeout=5.0),
            bucket=TokenBucket(1000.0, 1000.0),
            sleep=sleeps.append,
        )

    yield make
    for client in clients:
        client.close()
