"""Persistent data volumes (``SupportsVolumes``): one gp3 EBS volume per run and availability
zone, tagged ``corral:run``, that outlives the run's instances, so an attempt that comes back
in the same zone finds the checkpoints of the one before it. Each node of a gang has its own
(tagged ``corral:node-rank`` beyond the head's), for its ranks' parts of a sharded checkpoint.

An EBS volume lives in one zone: an instance that needs it is placed there. A spot offer in
another zone (the ``next-cheapest`` strategy moving away from a pool that was reclaimed) gets
a new volume there, and its checkpoints then come from object storage (``checkpoints.storage``)
- the old volume stays until the run is over. Volumes are attached at ``/dev/sdf`` once the
instance runs (the user-data waits for the device) and are never deleted on termination;
:meth:`AwsProvider.release_volumes` and the leak sweep delete them when the run is over.
"""

from __future__ import annotations

from typing import Any

from corral.errors import NotYetTerminated, ProviderError
from corral.providers.aws.client import Ec2

DEVICE = "/dev/sdf"
LIVE_STATES = ("creating", "available", "in-use")


#: the rank of the gang node whose volume it is (none: a single node's, as rank 0's)
TAG_RANK = "corral:node-rank"


def _tags(run_id: str, key: str, owner: str, rank: int | None) -> list[dict[str, Any]]:
    tags = [
        {"Key": "corral:run", "Value": run_id},
        {"Key": "corral:key", "Value": key},
        {"Key": "corral:owner", "Value": owner},
        {"Key": "corral:data", "Value": "true"},
        {"Key": "Name", "Value": f"corral-data-{run_id}"},
    ]
    if rank:
        tags.append({"Key": TAG_RANK, "Value": str(rank)})
    return [{"ResourceType": "volume", "Tags": tags}]


def _rank(vol: dict[str, Any]) -> str:
    for t in vol.get("Tags") or []:
        if t.get("Key") == TAG_RANK:
            return str(t.get("Value") or "0")
    return "0"


def run_volumes(
    ec2: Ec2, region: str, run_id: str | None = None, owner: str | None = None
) -> list[dict[str, Any]]:
    """corral's live data volumes in ``region``: of one run and/or one owner, or all."""
    filters = [
        {"Name": "tag:corral:data", "Values": ["true"]},
        {"Name": "status", "Values": list(LIVE_STATES)},
    ]
    if run_id is not None:
        filters.append({"Name": "tag:corral:run", "Values": [run_id]})
    if owner is not None:
        filters.append({"Name": "tag:corral:owner", "Values": [owner]})
    return list(ec2.pages(region, "describe_volumes", "Volumes", Filters=filters))


def zone_for(ec2: Ec2, region: str, run_id: str, instance_type: str) -> str:
    """Where an on-demand instance of ``run_id`` goes: the zone of its data volume if it has
    one, else the first zone that offers ``instance_type``."""
    for vol in run_volumes(ec2, region, run_id):
        return str(vol["AvailabilityZone"])
    offerings = ec2.call(
        region,
        "describe_instance_type_offerings",
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    ).get("InstanceTypeOfferings", [])
    zones = sorted(str(o["Location"]) for o in offerings)
    if not zones:
        raise ProviderError(f"aws: no zone of {region} offers {instance_type}")
    return zones[0]


def ensure_volume(
    ec2: Ec2,
    region: str,
    zone: str,
    *,
    run_id: str,
    key: str,
    size_gb: int,
    owner: str,
    rank: int | None = None,
) -> str:
    """The id of the run's data volume in ``zone``, created if there is none; a node of a
    gang (``rank``) has one of its own (an EBS volume attaches to one instance), which the
    node of that rank of a later gang in the zone finds again."""
    for vol in run_volumes(ec2, region, run_id):
        if vol["AvailabilityZone"] == zone and _rank(vol) == str(rank or 0):
            return str(vol["VolumeId"])
    vol = ec2.call(
        region,
        "create_volume",
        AvailabilityZone=zone,
        Size=size_gb,
        VolumeType="gp3",
        Encrypted=True,
        ClientToken=f"{key}-data"[:64],
        TagSpecifications=_tags(run_id, key, owner, rank),
    )
    return str(vol["VolumeId"])


def shown_attached(item: dict[str, Any], volume_id: str) -> bool:
    """The instance's ``describe_instances`` item shows the volume attached to it (then
    :func:`attach` need not ask EC2)."""
    return any(
        (m.get("Ebs") or {}).get("VolumeId") == volume_id
        and (m.get("Ebs") or {}).get("Status") == "attached"
        for m in item.get("BlockDeviceMappings") or []
    )


def attach(
    ec2: Ec2, region: str, volume_id: str, instance_id: str, *, device: str = DEVICE
) -> bool:
    """Attach the volume to the instance at ``device`` (idempotent). True once it is attached
    to it; False while it is still held elsewhere or being created (call again later)."""
    vols = ec2.call(region, "describe_volumes", VolumeIds=[volume_id]).get("Volumes", [])
    if not vols:
        raise ProviderError(f"aws: data volume {volume_id} is gone")
    vol = vols[0]
    if any(a.get("InstanceId") == instance_id for a in vol.get("Attachments") or []):
        return True
    if vol.get("State") != "available":
        return False
    try:
        ec2.call(region, "attach_volume", VolumeId=volume_id, InstanceId=instance_id, Device=device)
    except ProviderError as exc:
        if exc.fields.get("aws_code") in (
            "VolumeInUse",
            "IncorrectState",
            "IncorrectInstanceState",
        ):
            return False
        raise
    return True


def delete(ec2: Ec2, region: str, volume_id: str) -> None:
    """Delete a data volume; a missing one is fine. :class:`NotYetTerminated` while an
    instance still holds it."""
    try:
        ec2.call(region, "delete_volume", VolumeId=volume_id)
    except ProviderError as exc:
        code = exc.fields.get("aws_code")
        if code == "InvalidVolume.NotFound":
            return
        if code in ("VolumeInUse", "IncorrectState"):
            raise NotYetTerminated(f"aws: data volume {volume_id} is still attached") from None
        raise
