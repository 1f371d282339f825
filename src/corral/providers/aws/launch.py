"""The ``run_instances`` request of one launch, and the tags every corral instance carries.

Tags (on the instance; the run and key also on its root volume):

* ``corral:key`` - the launch key (idempotency, ``find``), ``corral:run``, ``corral:attempt``;
* ``corral:owner`` - the controller that launched it (the leak sweep touches only its own);
* ``corral:offer``, ``corral:price`` - to rebuild the :class:`Offer` after a restart;
* ``corral:volume`` - the data volume to attach, if any; ``Name`` for the console;
* ``corral:node-rank`` - the node's rank in its gang (a multi-node attempt; 0 is the head).

A node of a gang goes into its run's cluster placement group (``Placement.GroupName``,
:mod:`.placement`) in its head's zone, and into its run's own security group, which admits
the run's other nodes (:mod:`.gang_group`); a single node into the group the controller's
single-node instances share (:mod:`.network`).

``ClientToken`` is the key itself (a retried ``run_instances`` with the same token returns the
instance of the first call instead of a second one), or a digest of it when longer than EC2's
64 characters.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import httpx

from corral.errors import BadInput, ProviderError
from corral.pricing import CatalogEntry
from corral.providers.aws import gang_group, named, network, volumes
from corral.providers.aws.client import Ec2
from corral.providers.aws.settings import AwsSettings
from corral.providers.aws.userdata import MachinePayload, NamedMount, user_data
from corral.providers.base import Bootstrap, Offer
from corral.wire.plan import AgentPlan

KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
TAG_KEY = "corral:key"
TAG_RUN = "corral:run"
TAG_ATTEMPT = "corral:attempt"
TAG_OWNER = "corral:owner"
TAG_OFFER = "corral:offer"
TAG_PRICE = "corral:price"
TAG_VOLUME = "corral:volume"
TAG_RANK = "corral:node-rank"


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise BadInput(
            f"bad instance key {key!r}: use letters, digits, '.', '_' and '-' (at most 128)"
        )
    return key


def client_token(key: str) -> str:
    if len(key) <= 64:
        return key
    return "corral-" + hashlib.sha256(key.encode()).hexdigest()[:57]


def _tag_list(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in values.items()]


def instance_tags(
    *,
    key: str,
    run_id: str,
    attempt: int,
    owner: str,
    offer: Offer,
    volume_id: str | None,
    mounts: str = "",
    rank: int | None = None,
) -> dict[str, str]:
    tags = {
        TAG_KEY: key,
        TAG_RUN: run_id,
        TAG_ATTEMPT: str(attempt),
        TAG_OWNER: owner,
        TAG_OFFER: offer.offer_id,
        TAG_PRICE: f"{offer.price_per_hour:.6f}",
        "Name": f"corral-{key}",
    }
    if volume_id:
        tags[TAG_VOLUME] = volume_id
    if mounts:
        tags[named.TAG_MOUNTS] = mounts
    if rank is not None:
        tags[TAG_RANK] = str(rank)
    return tags


def run_instances_request(
    *,
    image_id: str,
    instance_type: str,
    key: str,
    user_data: str,
    root_device: str,
    root_gb: int,
    security_group: str,
    tags: dict[str, str],
    spot: bool,
    zone: str | None = None,
    subnet_id: str | None = None,
    instance_profile: str | None = None,
    key_name: str | None = None,
    placement_group: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``ec2.run_instances`` for one instance."""
    volume_tags = {k: tags[k] for k in (TAG_KEY, TAG_RUN, TAG_OWNER)}
    req: dict[str, Any] = {
        "ImageId": image_id,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": client_token(key),
        "UserData": user_data,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device,
                "Ebs": {
                    "VolumeSize": root_gb,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                    "Encrypted": True,
                },
            }
        ],
        # IMDSv2 only; one hop, so containers on the machine cannot read the user-data
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 1,
        },
        "SecurityGroupIds": [security_group],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": _tag_list(tags)},
            {"ResourceType": "volume", "Tags": _tag_list(volume_tags)},
        ],
    }
    if spot:
        # one-time + terminate: an interrupted attempt is recovered by corral elsewhere,
        # never silently restarted by a persistent request
        req["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    if zone or placement_group:
        req["Placement"] = {
            **({"AvailabilityZone": zone} if zone else {}),
            **({"GroupName": placement_group} if placement_group else {}),
        }
    if subnet_id:
        req["SubnetId"] = subnet_id
    if instance_profile:
        req["IamInstanceProfile"] = {"Name": instance_profile}
    if key_name:
        req["KeyName"] = key_name
    return req


class Launcher:
    """Builds the ``run_instances`` request of a launch: the AMI, the security group, the data
    volume, the machine's plan and user-data. Resolved AMIs and groups are kept per region."""

    def __init__(self, ec2: Ec2, settings: AwsSettings, http: httpx.Client | None = None):
        self.ec2, self.settings, self._http = ec2, settings, http
        self._images: dict[str, tuple[str, str, int]] = {}
        self._groups: dict[str, str] = {}
        self._vpcs: dict[str, str] = {}
        self._cidr: str | None = settings.controller_cidr

    def image(self, region: str) -> tuple[str, str, int]:
        """(AMI id, root device name, root snapshot size in GB) for ``region``."""
        if region not in self._images:
            image_id = self.settings.image_id
            if not image_id:
                image_id = self._default_image(region)
            images = self.ec2.call(region, "describe_images", ImageIds=[image_id]).get("Images")
            if not images:
                raise ProviderError(f"aws: AMI {image_id} does not exist in {region}")
            img = images[0]
            device = str(img.get("RootDeviceName") or "/dev/sda1")
            size = 0
            for m in img.get("BlockDeviceMappings") or []:
                if m.get("DeviceName") == device:
                    size = int((m.get("Ebs") or {}).get("VolumeSize") or 0)
            self._images[region] = (image_id, device, size)
        return self._images[region]

    def _default_image(self, region: str) -> str:
        """The default AMI: the SSM parameter's, else the newest Amazon-owned AMI matching the
        name pattern (the Deep Learning Base AMI either way, unless overridden)."""
        name = self.settings.image_parameter
        try:
            p = self.ec2.call(region, "get_parameter", service="ssm", Name=name)
            return str(p["Parameter"]["Value"])
        except ProviderError as exc:
            why = exc.message
        pattern = self.settings.image_name
        try:
            found = (
                self.ec2.call(
                    region,
                    "describe_images",
                    Owners=["amazon"],
                    Filters=[
                        {"Name": "name", "Values": [pattern]},
                        {"Name": "state", "Values": ["available"]},
                    ],
                ).get("Images")
                or []
            )
        except ProviderError as exc:
            found, why = [], f"{why}; {exc.message}"
        if not found:
            raise ProviderError(
                f"aws: cannot resolve the AMI in {region}: SSM parameter {name} ({why}) and no "
                f"Amazon AMI named like {pattern!r}; set CORRAL_AWS_IMAGE_ID"
            )
        newest = max(found, key=lambda i: str(i.get("CreationDate") or ""))
        return str(newest["ImageId"])

    def controller_cidr(self) -> str:
        """The controller's address the groups admit (``controller_cidr``, else learned once)."""
        if self._cidr is None:
            http = self._http or httpx.Client(timeout=10, trust_env=False)
            self._cidr = network.discover_cidr(self.settings.checkip_url, http)
        return self._cidr

    def vpc(self, region: str) -> str:
        """The VPC corral's instances go into in ``region`` (looked up once)."""
        if region not in self._vpcs:
            self._vpcs[region] = network.vpc_for(self.ec2, region, self.settings.subnet_id)
        return self._vpcs[region]

    def security_group(self, region: str) -> str:
        """A single node's group: the controller to the agent's port, shared by the
        controller's single-node instances in the VPC (made once, kept)."""
        if region not in self._groups:
            s = self.settings
            cidr = self.controller_cidr()
            self._groups[region] = network.ensure_security_group(
                self.ec2, region, self.vpc(region), s.agent_port, cidr, s.owner
            )
        return self._groups[region]

    def run_security_group(self, region: str, run_id: str) -> str:
        """A gang's node's group: its run's own (:mod:`.gang_group`), the controller to the
        agent's port and all TCP between the run's nodes, found or made at each node's
        launch (deleted with the run)."""
        s = self.settings
        return gang_group.ensure(
            self.ec2,
            region,
            self.vpc(region),
            run_id,
            owner=s.owner,
            port=s.agent_port,
            cidr=self.controller_cidr(),
        )

    def request(
        self,
        offer: Offer,
        entry: CatalogEntry,
        plan: AgentPlan,
        bootstrap: Bootstrap,
        key: str,
        *,
        spot: bool,
        zone: str | None,
        placement_group: str | None = None,
    ) -> dict[str, Any]:
        """The ``run_instances`` arguments (creating the run's data volume first if the
        settings ask for one); a node of a gang (``bootstrap.gang``) in ``zone`` and
        ``placement_group``, in its run's security group, which admits its gang."""
        s, region = self.settings, offer.region
        volume_id = None
        wanted = offer.details.get("volumes") or []
        if wanted:  # named volumes: where they are, else where the instance goes
            zone = zone or offer.details.get("volume_zone")
        if s.data_volume_gb or wanted:
            zone = zone or volumes.zone_for(self.ec2, region, plan.run_id, entry.instance_type)
        mounts = named.ensure(self.ec2, region, zone or "", owner=s.owner, key=key, wanted=wanted)
        if s.data_volume_gb:
            assert zone is not None
            volume_id = volumes.ensure_volume(
                self.ec2,
                region,
                zone,
                run_id=plan.run_id,
                key=key,
                size_gb=s.data_volume_gb,
                owner=s.owner,
                rank=bootstrap.gang.rank if bootstrap.gang else None,
            )
        image_id, root_device, image_gb = self.image(region)
        disk = float(offer.details.get("disk_gb") or 0)
        root_gb = max(s.root_volume_gb, image_gb, int(-(-disk // 1)))
        mount = s.data_mount if volume_id else None
        payload = MachinePayload(
            key=key,
            root=s.remote_root,
            data_mount=mount,
            mounts=[NamedMount(volume_id=v, device=d, path=p) for v, d, p in mounts],
            plan=plan,
            token=bootstrap.token,
            # the registry's credentials for the agent's `docker login` (never the job's)
            env={**bootstrap.env, **(bootstrap.image.agent_env() if bootstrap.image else {})},
        )
        return run_instances_request(
            image_id=image_id,
            instance_type=entry.instance_type,
            key=key,
            user_data=user_data(
                payload,
                install=s.install,
                volume_id=volume_id,
                install_env=dict(bootstrap.install),
            ),
            root_device=root_device,
            root_gb=root_gb,
            security_group=(
                self.run_security_group(region, plan.run_id)
                if bootstrap.gang
                else self.security_group(region)
            ),
            tags=instance_tags(
                key=key,
                run_id=plan.run_id,
                attempt=plan.attempt,
                owner=s.owner,
                offer=offer,
                volume_id=volume_id,
                mounts=named.mounts_tag(mounts),
                rank=bootstrap.gang.rank if bootstrap.gang else None,
            ),
            spot=spot,
            zone=zone,
            subnet_id=s.subnet_id,
            instance_profile=s.instance_profile,
            key_name=s.key_name,
            placement_group=placement_group,
        )
