"""Networking of corral's instances: one security group per VPC, agent port and controller
address, admitting TCP to the agent's port from the controller's address only (no SSH, nothing
else; egress stays open so the machine can install packages and reach storage).

The controller's address is ``controller_cidr`` when set, else this machine's public IPv4
address as ``checkip.amazonaws.com`` reports it, as a /32 (asked once per provider object,
through an injected ``httpx.Client``).
"""

from __future__ import annotations

import hashlib
import ipaddress

import httpx

from corral import __version__
from corral.errors import ProviderError, ProviderUnavailable
from corral.providers.aws.client import Ec2

GROUP_PREFIX = "corral-agent"


def discover_cidr(url: str, http: httpx.Client) -> str:
    """This machine's public address as a /32 (or /128), from a check-ip service."""
    try:
        r = http.get(url, headers={"User-Agent": f"corral/{__version__}"})
        r.raise_for_status()
        address = ipaddress.ip_address(r.text.strip())
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnavailable(
            f"aws: cannot learn this controller's public address from {url} "
            f"({type(exc).__name__}); set CORRAL_AWS_CONTROLLER_CIDR"
        ) from None
    return str(ipaddress.ip_network(address))


def group_name(port: int, cidr: str) -> str:
    digest = hashlib.sha256(cidr.encode()).hexdigest()[:10]
    return f"{GROUP_PREFIX}-{port}-{digest}"


def vpc_for(ec2: Ec2, region: str, subnet_id: str | None) -> str:
    """The VPC of ``subnet_id``, else the region's default VPC."""
    if subnet_id:
        subnets = ec2.call(region, "describe_subnets", SubnetIds=[subnet_id]).get("Subnets", [])
        if subnets:
            return str(subnets[0]["VpcId"])
        raise ProviderError(f"aws: subnet {subnet_id} does not exist in {region}")
    vpcs = ec2.call(
        region, "describe_vpcs", Filters=[{"Name": "isDefault", "Values": ["true"]}]
    ).get("Vpcs", [])
    if not vpcs:
        raise ProviderError(
            f"aws: {region} has no default VPC; set CORRAL_AWS_SUBNET_ID to launch into a subnet"
        )
    return str(vpcs[0]["VpcId"])


def _find_group(ec2: Ec2, region: str, vpc_id: str, name: str) -> str | None:
    groups = ec2.call(
        region,
        "describe_security_groups",
        Filters=[
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [vpc_id]},
        ],
    ).get("SecurityGroups", [])
    return str(groups[0]["GroupId"]) if groups else None


def ensure_security_group(
    ec2: Ec2, region: str, vpc_id: str, port: int, cidr: str, owner: str
) -> str:
    """The id of the group admitting ``cidr`` to TCP ``port`` in ``vpc_id`` (created once)."""
    name = group_name(port, cidr)
    group_id = _find_group(ec2, region, vpc_id, name)
    if group_id is None:
        try:
            group_id = ec2.call(
                region,
                "create_security_group",
                GroupName=name,
                Description=f"corral agent API (TCP {port}) from the controller only",
                VpcId=vpc_id,
                TagSpecifications=[
                    {
                        "ResourceType": "security-group",
                        "Tags": [
                            {"Key": "corral:managed", "Value": "true"},
                            {"Key": "corral:owner", "Value": owner},
                        ],
                    }
                ],
            )["GroupId"]
        except ProviderError as exc:  # created meanwhile by another controller
            if exc.fields.get("aws_code") != "InvalidGroup.Duplicate":
                raise
            group_id = _find_group(ec2, region, vpc_id, name)
            if group_id is None:
                raise
    net = ipaddress.ip_network(cidr)
    ranges = (
        {"IpRanges": [{"CidrIp": cidr, "Description": "corral controller"}]}
        if net.version == 4
        else {"Ipv6Ranges": [{"CidrIpv6": cidr, "Description": "corral controller"}]}
    )
    try:
        ec2.call(
            region,
            "authorize_security_group_ingress",
            GroupId=group_id,
            IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **ranges}],
        )
    except ProviderError as exc:
        if exc.fields.get("aws_code") != "InvalidPermission.Duplicate":
            raise
    return str(group_id)
