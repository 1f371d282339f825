"""The security group of a gang's run (``docs/multinode.md``): ``corral-gang-<run id>`` in the
run's VPC, tagged with the run and the controller that made it, holding only the run's nodes.

* **Its rules**: the agent's port from the controller's address (the rule of the single-node
  group, :func:`.network.controller_rule`), and all TCP from the group itself (one
  self-referencing rule: the ranks' rendezvous port and the data connections NCCL and gloo
  open on ports of their own choosing). No other instance is in it, so no other run's nodes
  reach these ones, nor these any other run's.
* **Made once**: found by its name (unique in its VPC) before it is created, a missing rule
  added to a group found (a crash between the creation and the rules); every node's launch
  asks, so a repair's replacement joins the group its kept nodes are in.
* **Deleted with the run** (:func:`delete`), once its instances are terminated: EC2 refuses
  to delete a group an instance or a network interface still uses, or another group's rule
  names (``DependencyViolation``, EC2 API Reference, DeleteSecurityGroup); a group that is
  gone already (``InvalidGroup.NotFound``) is done.
"""

from __future__ import annotations

from typing import Any

from corral.errors import NotYetTerminated, ProviderError
from corral.providers.aws import network
from corral.providers.aws.client import Ec2
from corral.providers.aws.listing import LIVE

GROUP_PREFIX = "corral-gang-"
TAG_RUN = "corral:run"
TAG_OWNER = "corral:owner"
TAG_MANAGED = "corral:managed"


def group_name(run_id: str) -> str:
    """The security group of the run's gangs."""
    return f"{GROUP_PREFIX}{run_id}"


def members_rule(group_id: str) -> dict[str, Any]:
    """The ingress rule admitting all TCP from the group's own members."""
    return {
        "IpProtocol": "tcp",
        "FromPort": 0,
        "ToPort": 65535,
        "UserIdGroupPairs": [{"GroupId": group_id, "Description": "corral gang: nodes of one run"}],
    }


def ensure(
    ec2: Ec2, region: str, vpc_id: str, run_id: str, *, owner: str, port: int, cidr: str
) -> str:
    """The id of the run's group in ``vpc_id`` with both its rules (made now if missing)."""
    group = network.ensure_group(
        ec2,
        region,
        vpc_id,
        group_name(run_id),
        f"corral gang of run {run_id}: the agent port from the controller, all TCP between "
        "its nodes",
        {TAG_RUN: run_id, TAG_OWNER: owner, TAG_MANAGED: "true"},
    )
    network.allow(ec2, region, group, network.controller_rule(port, cidr))
    network.allow(ec2, region, group, members_rule(str(group["GroupId"])))
    return str(group["GroupId"])


def groups(
    ec2: Ec2, region: str, *, run_id: str | None = None, owner: str | None = None
) -> list[dict[str, Any]]:
    """corral's gang groups in ``region`` (every VPC): of one run and/or one controller
    (the single-node groups, which name no run, are not among them)."""
    filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
    if run_id is not None:
        filters.append({"Name": f"tag:{TAG_RUN}", "Values": [run_id]})
    if owner is not None:
        filters.append({"Name": f"tag:{TAG_OWNER}", "Values": [owner]})
    found = ec2.pages(region, "describe_security_groups", "SecurityGroups", Filters=filters)
    return [
        g
        for g in found
        if str(g.get("GroupName", "")).startswith(GROUP_PREFIX)
        and any(t.get("Key") == TAG_RUN for t in g.get("Tags") or [])
    ]


def holds_instances(ec2: Ec2, region: str, group_id: str) -> bool:
    """Whether an instance that is not terminated is in the group."""
    return bool(
        ec2.instances(
            region,
            Filters=[
                {"Name": "instance.group-id", "Values": [group_id]},
                {"Name": "instance-state-name", "Values": LIVE},
            ],
        )
    )


def delete(ec2: Ec2, region: str, group_id: str, name: str) -> bool:
    """Delete the group (gone already: done). True once it is gone; False while EC2 refuses
    with no instance in it (a network interface of an instance terminated moments ago, which
    EC2 deletes shortly after, or another group's rule naming it); :class:`NotYetTerminated`
    while an instance that is not terminated is still in it."""
    try:
        ec2.call(region, "delete_security_group", GroupId=group_id)
    except ProviderError as exc:
        code = exc.fields.get("aws_code")
        if code == "InvalidGroup.NotFound":
            return True
        if code != "DependencyViolation":
            raise
        if holds_instances(ec2, region, group_id):
            raise NotYetTerminated(f"aws: security group {name} still holds instances") from None
        return False
    return True
