"""Networking of corral's instances: for single-node instances one security group per VPC,
agent port and controller address, admitting TCP to the agent's port from the controller's
address only (no SSH, nothing else; egress stays open so the machine can install packages and
reach storage). A gang's nodes go into their run's own group instead, made from the same
pieces with one more rule (:mod:`.gang_group`).

The controller's address is ``controller_cidr`` when set, else this machine's public IPv4
address as ``checkip.amazonaws.com`` reports it, as a /32 (asked once per provider object,
through an injected ``httpx.Client``).
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any

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


def find_group(ec2: Ec2, region: str, vpc_id: str, name: str) -> dict[str, Any] | None:
    """The security group ``name`` of ``vpc_id`` as ``describe_security_groups`` gives it
    (with its ``IpPermissions``), or None."""
    groups = ec2.call(
        region,
        "describe_security_groups",
        Filters=[
            {"Name": "group-name", "Values": [name]},
            {"Name": "vpc-id", "Values": [vpc_id]},
        ],
    ).get("SecurityGroups", [])
    return dict(groups[0]) if groups else None


def ensure_group(
    ec2: Ec2, region: str, vpc_id: str, name: str, description: str, tags: dict[str, str]
) -> dict[str, Any]:
    """The security group ``name`` of ``vpc_id`` (``GroupId``, ``IpPermissions``), created
    with ``tags`` unless it exists: a name is unique in its VPC, so a retry after a crash, or
    another controller that created it meanwhile (``InvalidGroup.Duplicate``), finds it."""
    found = find_group(ec2, region, vpc_id, name)
    if found is not None:
        return found
    try:
        group_id = ec2.call(
            region,
            "create_security_group",
            GroupName=name,
            Description=description,
            VpcId=vpc_id,
            TagSpecifications=[
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )["GroupId"]
    except ProviderError as exc:  # created meanwhile
        if exc.fields.get("aws_code") != "InvalidGroup.Duplicate":
            raise
        found = find_group(ec2, region, vpc_id, name)
        if found is None:
            raise
        return found
    return {"GroupId": str(group_id), "IpPermissions": []}


def controller_rule(port: int, cidr: str) -> dict[str, Any]:
    """The ingress rule admitting ``cidr`` (the controller) to TCP ``port`` (the agent's)."""
    net = ipaddress.ip_network(cidr)
    ranges = (
        {"IpRanges": [{"CidrIp": cidr, "Description": "corral controller"}]}
        if net.version == 4
        else {"Ipv6Ranges": [{"CidrIpv6": cidr, "Description": "corral controller"}]}
    )
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **ranges}


def _sources(rule: dict[str, Any]) -> set[str]:
    return (
        {str(r.get("CidrIp")) for r in rule.get("IpRanges") or []}
        | {str(r.get("CidrIpv6")) for r in rule.get("Ipv6Ranges") or []}
        | {str(p.get("GroupId")) for p in rule.get("UserIdGroupPairs") or []}
    )


def has_rule(group: dict[str, Any], rule: dict[str, Any]) -> bool:
    """Whether ``group`` (as described) already holds the ingress ``rule``."""
    ports = (rule["IpProtocol"], rule.get("FromPort"), rule.get("ToPort"))
    return any(
        (held.get("IpProtocol"), held.get("FromPort"), held.get("ToPort")) == ports
        and _sources(rule) <= _sources(held)
        for held in group.get("IpPermissions") or []
    )


def allow(ec2: Ec2, region: str, group: dict[str, Any], rule: dict[str, Any]) -> None:
    """Add the ingress ``rule`` to ``group`` unless it holds it (``InvalidPermission.Duplicate``,
    added meanwhile: done)."""
    if has_rule(group, rule):
        return
    try:
        ec2.call(
            region,
            "authorize_security_group_ingress",
            GroupId=group["GroupId"],
            IpPermissions=[rule],
        )
    except ProviderError as exc:
        if exc.fields.get("aws_code") != "InvalidPermission.Duplicate":
            raise


def ensure_security_group(
    ec2: Ec2, region: str, vpc_id: str, port: int, cidr: str, owner: str
) -> str:
    """The id of the group admitting ``cidr`` to TCP ``port`` in ``vpc_id`` (created once)."""
    group = ensure_group(
        ec2,
        region,
        vpc_id,
        group_name(port, cidr),
        f"corral agent API (TCP {port}) from the controller only",
        {"corral:managed": "true", "corral:owner": owner},
    )
    allow(ec2, region, group, controller_rule(port, cidr))
    return str(group["GroupId"])
