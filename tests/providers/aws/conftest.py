"""Fixtures of the AWS provider tests: one moto server per test process, a fake of the AWS
Price List API (moto has none) serving the bundled catalog's on-demand prices, a fake IMDS per
test, machines played on this machine, and a provider wired to them.

The moto server is not reset between tests (moto rebuilds each region lazily after a reset,
seconds per test); each test gets its own ``owner`` tag instead, which is what scopes the
provider's listing and leak sweep."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.providers.aws.provider import AwsProvider
from corral.testing.aws import LocalMachineRunner
from pricing.fake_price_list import FakePriceList

from .fake_imds import FakeImds
from .harness import MotoAws


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoAws]:
    server = MotoAws()
    yield server
    server.close()


@pytest.fixture
def aws(moto_server: MotoAws) -> MotoAws:
    return moto_server


@pytest.fixture
def price_list(moto_server: MotoAws) -> FakePriceList:
    return moto_server.price_list


@pytest.fixture
def owner() -> str:
    return "t-" + uuid.uuid4().hex[:12]


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    server = FakeImds()
    yield server
    server.close()


@pytest.fixture
def runner(corral_home: Path, imds: FakeImds) -> Iterator[LocalMachineRunner]:
    machines = LocalMachineRunner(corral_home, imds_url=imds.url, notice_interval=0.1)
    yield machines
    machines.stop_all()


@pytest.fixture
def make_provider(
    aws: MotoAws, runner: LocalMachineRunner, owner: str, price_list: FakePriceList
) -> Callable[..., AwsProvider]:
    """A provider on the fake AWS (EC2 and SSM on moto, the Price List API on its own fake);
    keyword arguments override settings."""

    def make(**kw: object) -> AwsProvider:
        settings: dict[str, object] = {
            "regions": ["us-east-1"],
            "image_id": aws.image_id(),
            "controller_cidr": "203.0.113.7/32",
            "owner": owner,
            "install": "corral==0.1.0",
        }
        settings.update(kw)
        extra = {
            k: settings.pop(k)
            for k in ("machine_runner", "clock", "sleep", "http", "session", "endpoints")
            if k in settings
        }
        return AwsProvider(
            extra.pop("session", None) or aws.session(),
            endpoint_url=aws.url,
            endpoints=extra.pop("endpoints", None) or {"pricing": price_list.url},
            environ={},
            machine_runner=extra.pop("machine_runner", runner),
            **extra,
            **settings,
        )

    return make
