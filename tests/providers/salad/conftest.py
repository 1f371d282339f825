"""Fixtures: a fake SaladCloud on loopback and Salad providers pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.salad import SaladProvider, SaladSettings

from .fake_server import API_KEY, FakeSalad


class Sleeps:
    """The provider's sleep: records and returns at once (tests never wait on backoff)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeSalad]:
    server = FakeSalad(tmp_path / "salad")
    yield server
    server.close()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_provider(
    fake: FakeSalad, corral_home: Path, sleeps: Sleeps
) -> Iterator[Callable[..., SaladProvider]]:
    clients: list[httpx.Client] = []

    def make(
        *, api_key: str = API_KEY, bucket: TokenBucket | None = None, **settings
    ) -> SaladProvider:
        fields = {**fake.settings(), "list_cache_s": 0.2, "instances_cache_s": 0.5, **settings}
        clients.append(httpx.Client())
        return SaladProvider(
            api_key,
            settings=SaladSettings(**fields),
            client=clients[-1],
            home=corral_home,
            retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, timeout=5.0),
            bucket=bucket or TokenBucket(1000.0, 1000.0),
            sleep=sleeps,
        )

    yield make
    for client in clients:
        client.close()
