"""Settings of the AWS provider: constructor arguments, or ``CORRAL_AWS_*`` environment
variables when the controller builds it by name (``CORRAL_PROVIDERS=aws``).

Credentials are never settings: they come from the boto3 session (the environment, a profile,
an instance role), and no setting here ever holds one.

=================================  ==============================================================
variable                           meaning
=================================  ==============================================================
CORRAL_AWS_REGIONS                 comma-separated regions to offer (default: the session's
                                   region, else us-east-1)
CORRAL_AWS_IMAGE_ID                AMI to boot (default: resolved from the SSM parameter below)
CORRAL_AWS_IMAGE_PARAMETER         SSM parameter naming the AMI per region (default: the AWS
                                   Deep Learning Base AMI, Ubuntu 24.04, with NVIDIA drivers;
                                   its python3 is 3.12, and corral's node needs 3.11 or later)
CORRAL_AWS_IMAGE_NAME              when that parameter cannot be read (no ssm:GetParameter
                                   right, say): the newest Amazon-owned AMI whose name matches
                                   this pattern (default: the same Deep Learning Base AMI)
CORRAL_AWS_AGENT_PORT              TCP port of the agent's API on the instance (default 7450)
CORRAL_AWS_CONTROLLER_CIDR         who may reach that port (default: this machine's public
                                   address /32, asked from checkip.amazonaws.com)
CORRAL_AWS_INSTALL                 advanced: a pip requirement that installs corral on the
                                   instance instead of this corral's own wheel (or the same
                                   version from CORRAL_NODE_INDEX_URL / PyPI)
CORRAL_AWS_DATA_VOLUME_GB          size of a persistent gp3 data volume per run (checkpoints
                                   live on it); unset: none
CORRAL_AWS_ROOT_VOLUME_GB          least root volume size (default 100)
CORRAL_AWS_INSTANCE_PROFILE        IAM instance profile name (e.g. for S3 checkpoints)
CORRAL_AWS_KEY_NAME                EC2 key pair (for debugging over SSH; not needed by corral)
CORRAL_AWS_SUBNET_ID               launch into this subnet (its VPC gets the security group)
CORRAL_AWS_PRIVATE_IP              "1": reach the agent on the private address (VPN, peering)
CORRAL_AWS_OWNER                   tag value that scopes the leak sweep to this controller
CORRAL_AWS_LIVE_PRICES             "0": on-demand prices from the bundled catalog only, not read
                                   live from the AWS Price List API (default: live, the catalog
                                   where the API cannot be read)
CORRAL_AWS_LIST_CACHE_S            seconds one listing of this controller's instances (per
                                   region) serves every run's status (default 3; 0: each
                                   status asks EC2 for its instance alone)
=================================  ==============================================================
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import socket
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral import paths
from corral.providers.common.env_settings import validated_settings

PREFIX = "CORRAL_AWS_"
#: the Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 24.04 (python3 3.12), x86_64; the
#: Ubuntu 22.04 one has python 3.10, too old for corral's node (3.11 or later)
DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)
#: the same AMI by name (the newest Amazon-owned match), when SSM cannot be read
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
#: an AWS region name (us-east-1, ap-southeast-4, us-gov-west-1, eu-central-2)
REGION_RE = r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$"
DEFAULT_AGENT_PORT = 7450
CHECKIP_URL = "https://checkip.amazonaws.com"


def default_owner() -> str:
    """A stable id of this controller: its host and its CORRAL_HOME."""
    raw = f"{socket.gethostname()}:{paths.home()}"
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


class AwsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    regions: list[str] = Field(default_factory=list, description="Empty: the session's region.")
    image_id: str | None = None
    image_parameter: str = DLAMI_PARAMETER
    image_name: str = DLAMI_NAME
    agent_port: int = Field(DEFAULT_AGENT_PORT, ge=1, le=65535)
    controller_cidr: str | None = None
    checkip_url: str = CHECKIP_URL
    install: str | None = None
    remote_root: str = "/opt/corral"
    data_volume_gb: int | None = Field(None, ge=1, le=65536)
    data_mount: str = "/mnt/corral-data"
    root_volume_gb: int = Field(100, ge=8, le=65536)
    instance_profile: str | None = None
    key_name: str | None = None
    subnet_id: str | None = None
    use_private_ip: bool = False
    spot_cache_s: float = Field(300.0, ge=0, description="How long live spot prices are reused.")
    live_prices: bool = Field(
        True, description="Read on-demand prices from the AWS Price List API (else the catalog)."
    )
    price_cache_s: float = Field(
        6 * 3600.0, ge=0, description="How long live on-demand prices are reused."
    )
    list_cache_s: float = Field(
        3.0,
        ge=0,
        le=60,
        description="How long one listing of the owner's instances (per region) serves every "
        "run's status; 0: each status asks for its instance alone.",
    )
    owner: str = Field(default_factory=default_owner, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    max_grace_s: float = Field(
        90.0, gt=0, le=110, description="Cap on the plan's grace period (the notice is 120 s)."
    )

    @field_validator("regions")
    @classmethod
    def _regions(cls, value: list[str]) -> list[str]:
        for region in value:
            if not re.match(REGION_RE, region):
                raise ValueError(f"{region!r} is not an AWS region name (like us-east-1)")
        return value

    @field_validator("controller_cidr")
    @classmethod
    def _cidr(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return str(ipaddress.ip_network(value.strip(), strict=False))

    @field_validator("remote_root", "data_mount")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "'" in value or " " in value:
            raise ValueError("must be an absolute path without spaces or quotes")
        return value.rstrip("/") or "/"


_ENV_FIELDS = {
    "REGIONS": "regions",
    "IMAGE_ID": "image_id",
    "IMAGE_PARAMETER": "image_parameter",
    "IMAGE_NAME": "image_name",
    "AGENT_PORT": "agent_port",
    "CONTROLLER_CIDR": "controller_cidr",
    "INSTALL": "install",
    "DATA_VOLUME_GB": "data_volume_gb",
    "ROOT_VOLUME_GB": "root_volume_gb",
    "INSTANCE_PROFILE": "instance_profile",
    "KEY_NAME": "key_name",
    "SUBNET_ID": "subnet_id",
    "PRIVATE_IP": "use_private_ip",
    "OWNER": "owner",
    "LIST_CACHE_S": "list_cache_s",
    "LIVE_PRICES": "live_prices",
}


def settings_from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> AwsSettings:
    """Settings from ``CORRAL_AWS_*`` variables, then ``overrides`` (constructor arguments).
    A bad value is :class:`BadInput` naming the variable or argument."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    origin: dict[str, str] = {}
    for suffix, field in _ENV_FIELDS.items():
        raw = env.get(PREFIX + suffix, "").strip()
        if not raw:
            continue
        if field == "regions":
            values[field] = [r.strip() for r in raw.split(",") if r.strip()]
        elif field in ("use_private_ip", "live_prices"):
            values[field] = raw.lower() in ("1", "true", "yes", "on")
        else:
            values[field] = raw
        origin[field] = PREFIX + suffix
    for key, value in overrides.items():
        if value is not None:
            values[key] = value
            origin[key] = f"argument {key!r}"
    return validated_settings(AwsSettings, values, what="aws provider", origin=origin)
