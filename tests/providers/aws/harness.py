"""The fake AWS for tests: a moto server on loopback (EC2's books), a fake of the Price List
API (moto has no ``pricing``; it serves the bundled catalog's on-demand prices), plus what moto
cannot do - reclaiming a spot instance the way EC2 does (``StateReason``
``Server.SpotInstanceTermination``), a machine powering itself off, placement groups
(:mod:`.moto_placement`, added to moto's EC2 in this process) and the refusal to delete a
security group in use (:mod:`.moto_security_groups`).
Machines are played by :class:`~corral.testing.aws.LocalMachineRunner`, spot
notices by :class:`fake_imds.FakeImds`.

Usable from other test packages (``from providers.aws.harness import MotoAws``) and across
processes: a controller started with :meth:`MotoAws.env` talks to the same moto server and
runs its machines under the same ``CORRAL_HOME``.
"""

from __future__ import annotations

from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

from corral.pricing import load_catalog
from pricing.fake_price_list import FakePriceList, product

from . import moto_security_groups
from .moto_placement import PlacementBooks, install

ACCOUNT = "123456789012"
REGION = "us-east-1"
#: fake credentials; distinctive so tests can look for them in logs and messages
ACCESS_KEY = "AKIAFAKEFAKEFAKE1234"
SECRET_KEY = "corral-test-secret-0123456789-never-log-me"


class MotoAws:
    def __init__(self) -> None:
        #: placement groups, which moto lacks (a test sets a group's capacity here)
        self.placement: PlacementBooks = install()
        moto_security_groups.install()  # a group in use is not deleted, as on EC2
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        self._images: dict[str, str] = {}
        self._sessions: dict[str, Any] = {}
        self.price_list = FakePriceList(catalog_products(), page_size=100)

    def session(self, region: str = REGION) -> Any:
        """A boto3 session with the fake credentials (one per region, reused: loading the
        service models again for every provider would cost seconds per test)."""
        if region not in self._sessions:
            self._sessions[region] = boto3.Session(
                aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=region
            )
        return self._sessions[region]

    def client(self, service: str = "ec2", region: str = REGION) -> Any:
        return self.session(region).client(service, endpoint_url=self.url)

    def env(self) -> dict[str, str]:
        """Environment for another process (a controller) to use this fake AWS."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ENDPOINT_URL_PRICING": self.price_list.url,  # boto3's per-service endpoint
        }

    def reset(self) -> None:
        httpx.post(f"{self.url}/moto-api/reset", timeout=10, trust_env=False).raise_for_status()

    def image_id(self, region: str = REGION) -> str:
        """An Ubuntu AMI of moto's (the same after a reset)."""
        if region not in self._images:
            images = self.client("ec2", region).describe_images(
                Owners=["amazon"], Filters=[{"Name": "name", "Values": ["*ubuntu*"]}]
            )["Images"]
            self._images[region] = str(images[0]["ImageId"])
        return self._images[region]

    def instances(self, region: str = REGION, **kw: Any) -> list[dict[str, Any]]:
        pages = self.client("ec2", region).get_paginator("describe_instances").paginate(**kw)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def live_instances(self, owner: str, region: str = REGION) -> list[dict[str, Any]]:
        """Instances tagged with ``owner`` (tests share one server) that are not terminated."""
        return [
            i
            for i in self.instances(
                region, Filters=[{"Name": "tag:corral:owner", "Values": [owner]}]
            )
            if i["State"]["Name"] != "terminated"
        ]

    def reclaim(self, instance_id: str, region: str = REGION, runner: Any = None) -> None:
        """EC2 takes a spot instance back: terminated, with the spot reason; its machine (if
        a runner plays it) is killed at once."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        inst = ec2_backends[ACCOUNT][region].get_instance(instance_id)
        inst.terminate()
        inst.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination",
            "Server.SpotInstanceTermination",
        )
        if runner is not None:
            runner.kill(instance_id)

    def power_off(self, instance_id: str, region: str = REGION) -> None:
        """The machine shut itself down (instance-initiated shutdown = terminate), as a real
        instance does on ``shutdown -h now``; a test host never powers itself off."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        inst = ec2_backends[ACCOUNT][region].get_instance(instance_id)
        inst.terminate()
        inst.state_reason = StateReason(
            "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
            "Client.InstanceInitiatedShutdown",
        )

    def close(self) -> None:
        self.server.stop()
        self.price_list.close()


def catalog_products() -> list[dict[str, Any]]:
    """The bundled catalog's on-demand prices as Price List products."""
    out = []
    for e in load_catalog("aws", "ec2").entries:
        gpu_mem = f"{e.gpu_memory_gb * e.gpu_count:g} GB" if e.gpu_memory_gb else "NA"
        for region, usd in e.prices.items():
            out.append(
                product(
                    e.instance_type,
                    region,
                    usd,
                    vcpu=int(e.vcpus),
                    memory=f"{e.memory_gb:g} GiB",
                    gpu=str(e.gpu_count),
                    gpu_memory=gpu_mem,
                )
            )
    return out
