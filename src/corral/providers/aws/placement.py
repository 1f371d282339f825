"""Where a gang's instances go on EC2 (``docs/multinode.md``): a cluster placement group per run,
``corral-<run id>``, tagged with the run and the controller that made it (the run's security
group, which lets its nodes reach one another: :mod:`.gang_group`).

* **Which instance types a cluster group takes** (EC2 User Guide, "Placement strategies for
  your placement groups", cluster placement groups' rules,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html): current
  generation instances except burstable performance ones (T2, T3, T3a, T4g), Mac1 and
  M7i-flex; of the previous generation A1, C3, C4, I2, M4, R3, R4. EC2 says it per type in
  ``describe_instance_types``' ``PlacementGroupInfo`` (asked once per type and region; the
  rule above where that call is refused). Every GPU family of corral's catalog is of the
  current generation; a type a cluster group does not take gets no group, and its nodes
  share only the zone.
* **Names and errors**: a group name is unique per account and region (up to 255 ASCII
  characters); ``InvalidPlacementGroup.Duplicate`` on creating one that exists (ours: done),
  ``InvalidPlacementGroup.Unknown`` on deleting one that is gone (done), and
  ``InvalidPlacementGroup.InUse`` while an instance that is not terminated is in it
  (:class:`NotYetTerminated`: the caller asks again).
"""

from __future__ import annotations

import re
from typing import Any

from corral.errors import NotYetTerminated, ProviderError
from corral.providers.aws.client import Ec2

#: the head's first rendezvous port (stage ``i`` meets on this + ``i``): torch's default
GANG_PORT = 29500
TAG_RUN = "corral:run"
TAG_OWNER = "corral:owner"
#: instance families of the previous generation that cluster groups still take
_OLD_CLUSTER_FAMILIES = frozenset({"a1", "c3", "c4", "i2", "m4", "r3", "r4"})
#: families of the current generation that they do not
_NO_CLUSTER = re.compile(r"^(t\d[a-z]*|mac\d[a-z0-9-]*|m7i-flex)$")
#: other families of the previous generation, as EC2's instance-type pages list them (the
#: GPU ones among them: P2, G2, G3)
_OLD_FAMILIES = frozenset(
    {"m1", "m2", "m3", "c1", "cc2", "cg1", "cr1", "hi1", "hs1", "g2", "g3", "g3s", "p2"}
)


def cluster_by_doc(instance_type: str) -> bool:
    """Whether a cluster placement group takes ``instance_type``, by the User Guide's rule."""
    family = instance_type.split(".", 1)[0].lower()
    if family in _OLD_CLUSTER_FAMILIES:
        return True
    return not (_NO_CLUSTER.match(family) or family in _OLD_FAMILIES)


def supports_cluster(ec2: Ec2, region: str, instance_type: str) -> bool:
    """Whether a cluster placement group takes ``instance_type`` in ``region``: what
    ``describe_instance_types`` says (``PlacementGroupInfo``), else (the call refused, the
    type not listed) the User Guide's rule."""
    try:
        found = ec2.call(region, "describe_instance_types", InstanceTypes=[instance_type])
    except ProviderError:
        return cluster_by_doc(instance_type)
    for item in found.get("InstanceTypes") or []:
        strategies = (item.get("PlacementGroupInfo") or {}).get("SupportedStrategies")
        if strategies is not None:
            return "cluster" in strategies
    return cluster_by_doc(instance_type)


def group_name(run_id: str) -> str:
    """The cluster placement group of the run's gangs."""
    return f"corral-{run_id}"


def ensure_group(ec2: Ec2, region: str, run_id: str, owner: str) -> str:
    """The run's cluster placement group in ``region``, created unless it exists."""
    name = group_name(run_id)
    try:
        ec2.call(
            region,
            "create_placement_group",
            GroupName=name,
            Strategy="cluster",
            TagSpecifications=[
                {
                    "ResourceType": "placement-group",
                    "Tags": [
                        {"Key": TAG_RUN, "Value": run_id},
                        {"Key": TAG_OWNER, "Value": owner},
                        {"Key": "corral:managed", "Value": "true"},
                    ],
                }
            ],
        )
    except ProviderError as exc:  # made by this run's head (or an earlier try of this node)
        if exc.fields.get("aws_code") != "InvalidPlacementGroup.Duplicate":
            raise
    return name


def groups(
    ec2: Ec2, region: str, *, run_id: str | None = None, owner: str | None = None
) -> list[dict[str, Any]]:
    """corral's placement groups in ``region``: of one run and/or one controller."""
    filters = [{"Name": "tag:corral:managed", "Values": ["true"]}]
    if run_id is not None:
        filters.append({"Name": f"tag:{TAG_RUN}", "Values": [run_id]})
    if owner is not None:
        filters.append({"Name": f"tag:{TAG_OWNER}", "Values": [owner]})
    found = ec2.call(region, "describe_placement_groups", Filters=filters)
    return [g for g in found.get("PlacementGroups") or [] if g.get("State") != "deleted"]


def delete_group(ec2: Ec2, region: str, name: str) -> None:
    """Delete the placement group ``name`` (gone already: done). :class:`NotYetTerminated`
    while an instance is still in it."""
    try:
        ec2.call(region, "delete_placement_group", GroupName=name)
    except ProviderError as exc:
        code = exc.fields.get("aws_code")
        if code == "InvalidPlacementGroup.Unknown":
            return
        if code == "InvalidPlacementGroup.InUse":
            raise NotYetTerminated(f"aws: placement group {name} still holds instances") from None
        raise
