"""Fixtures: a fake SaladCloud on loopback and Salad providers pointed at it. The fake is bound
to SaladCloud's published documents: a test whose exchanges broke either fails at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.providers.http import RetryPolicy, TokenBucket
from corral.providers.salad import SaladProvider, SaladSettings
from support.fakehttp import Sleeps

from .fake_server import API_KEY, FakeSalad


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeSalad]:
    server = FakeSalad(tmp_path / "salad")
    yield server
    server.close()  # and fails the test on any exchange that broke the contract


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
