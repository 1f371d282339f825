"""Named EBS volumes (``spec.volumes``): where an instance that mounts them may run, the
volumes created when missing and attached once it runs, and ``corral volume ls/rm``.

A named volume is a gp3, encrypted EBS volume tagged ``corral:volume-name`` (and
``corral:owner``, ``Name``). It lives in one availability zone: a job whose volumes exist runs
in their zone (its spot offers in that zone only, its on-demand instance placed there); volumes
in two zones cannot be mounted together. A job whose volumes are all new runs anywhere, and
the launch creates them in the instance's zone. Each is attached at its own device (``/dev/sdg``
onwards, kept in the instance's ``corral:mounts`` tag) once the instance runs, and the user-data
formats it if blank and mounts it at its path before the agent starts.

They never carry ``corral:data`` (the per-run data volume's tag), so neither ``release_run``
nor the leak sweep ever deletes one: only :func:`remove` (``corral volume rm``) does. Volumes
belong to the controller's owner (``CORRAL_AWS_OWNER``), like its instances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from corral.errors import BadInput, Conflict, InfeasibleRequest, NotFound, ProviderError
from corral.providers.aws.client import Ec2
from corral.providers.aws.volumes import LIVE_STATES
from corral.providers.base import Offer, Requirements, VolumeInfo

TAG_NAME = "corral:volume-name"
TAG_OWNER = "corral:owner"
#: on the instance: ``vol-1=/dev/sdg,vol-2=/dev/sdh`` (what to attach where once it runs)
TAG_MOUNTS = "corral:mounts"
DEVICES = tuple(f"/dev/sd{c}" for c in "ghijklmnop")


def _tag(item: dict[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in item.get("Tags") or [] if t.get("Key") == key), None)


def find(ec2: Ec2, region: str, owner: str, name: str | None = None) -> list[dict[str, Any]]:
    """The owner's live named volumes in ``region`` (those named ``name``, when given)."""
    filters = [
        {"Name": "tag-key", "Values": [TAG_NAME]},
        {"Name": f"tag:{TAG_OWNER}", "Values": [owner]},
        {"Name": "status", "Values": list(LIVE_STATES)},
    ]
    if name is not None:
        filters.append({"Name": f"tag:{TAG_NAME}", "Values": [name]})
    return list(ec2.pages(region, "describe_volumes", "Volumes", Filters=filters))


def placement(
    req: Requirements, scan: Callable[[Callable[[str], Iterable[Any]]], list[Any]], find_in: Any
) -> tuple[str, str] | None:
    """(region, zone) where the job's existing volumes are, or None when none exists yet.
    ``scan(fn)`` runs ``fn(region)`` over every region corral may use; ``find_in(region)``
    lists the owner's named volumes there. InfeasibleRequest if they are in several zones."""
    if not req.volumes:
        return None
    if len(req.volumes) > len(DEVICES):
        raise InfeasibleRequest(
            f"aws: at most {len(DEVICES)} named volumes per instance; the job names "
            f"{len(req.volumes)}"
        )
    wanted = {v.name for v in req.volumes}
    found = scan(
        lambda r: [
            (r, str(v["AvailabilityZone"]), _tag(v, TAG_NAME))
            for v in find_in(r)
            if _tag(v, TAG_NAME) in wanted
        ]
    )
    zones = sorted({(r, z) for r, z, _ in found})
    if len(zones) > 1:
        where = ", ".join(f"{n} in {z}" for _, z, n in sorted(found, key=lambda x: x[2] or ""))
        raise InfeasibleRequest(
            f"aws: the job's volumes are in different availability zones ({where}); an EBS "
            "volume attaches only in its own zone"
        )
    return zones[0] if zones else None


def fit(offers: list[Offer], req: Requirements, pinned: tuple[str, str] | None) -> list[Offer]:
    """The offers where the job's volumes can attach, each carrying what the launch needs
    (``details["volumes"]``; ``details["volume_zone"]`` when they exist)."""
    if not req.volumes:
        return offers
    wanted = [v.model_dump() for v in req.volumes]
    out = []
    for o in offers:
        if pinned is not None:
            region, zone = pinned
            if o.region != region or (o.spot and o.details.get("zone") != zone):
                continue
        details = {**o.details, "volumes": wanted}
        if pinned is not None:
            details["volume_zone"] = pinned[1]
        out.append(o.model_copy(update={"details": details}))
    if pinned is not None and offers and not out:
        raise InfeasibleRequest(
            f"aws: the job's volumes are in {pinned[1]}, where no offer fits the job "
            "(its regions, spot setting or price limit)"
        )
    return out


def ensure(
    ec2: Ec2, region: str, zone: str, *, owner: str, key: str, wanted: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    """(volume id, device, mount path) of each wanted volume in ``zone``, created when
    missing (its ``ClientToken`` makes a retried create return the same volume)."""
    out = []
    for device, want in zip(DEVICES, wanted, strict=False):
        found = [v for v in find(ec2, region, owner, want["name"]) if v["AvailabilityZone"] == zone]
        if found:
            volume_id = str(sorted(found, key=lambda v: v["VolumeId"])[0]["VolumeId"])
        else:
            tags = {TAG_NAME: want["name"], TAG_OWNER: owner, "Name": want["name"]}
            vol = ec2.call(
                region,
                "create_volume",
                AvailabilityZone=zone,
                Size=int(want["size_gb"]),
                VolumeType="gp3",
                Encrypted=True,
                ClientToken=f"{key}-vol-{want['name']}"[:64],
                TagSpecifications=[
                    {
                        "ResourceType": "volume",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
            )
            volume_id = str(vol["VolumeId"])
        out.append((volume_id, device, str(want["mount"])))
    return out


def mounts_tag(mounts: list[tuple[str, str, str]]) -> str:
    return ",".join(f"{vid}={dev}" for vid, dev, _ in mounts)


def parse_mounts_tag(value: str | None) -> list[tuple[str, str]]:
    """(volume id, device) pairs of an instance's ``corral:mounts`` tag."""
    out = []
    for part in (value or "").split(","):
        vid, _, dev = part.partition("=")
        if vid.startswith("vol-") and dev in DEVICES:
            out.append((vid, dev))
    return out


def info(vol: dict[str, Any], provider: str = "aws") -> VolumeInfo:
    attached = [str(a["InstanceId"]) for a in vol.get("Attachments") or [] if a.get("InstanceId")]
    created = vol.get("CreateTime")
    return VolumeInfo(
        provider=provider,
        name=_tag(vol, TAG_NAME) or "",
        volume_id=str(vol["VolumeId"]),
        region=str(vol.get("AvailabilityZone") or ""),
        size_gb=int(vol.get("Size") or 0),
        state=str(vol.get("State") or ""),
        attached_to=attached,
        created_at=created if isinstance(created, datetime) else None,
    )


def remove(
    ec2: Ec2, volumes: list[tuple[str, dict[str, Any]]], name: str, region: str | None
) -> list[VolumeInfo]:
    """Delete the named volume among ``volumes`` ((region, volume) pairs): in ``region`` (a
    region or a zone) only, when given."""

    def where(r: str, v: dict[str, Any]) -> bool:
        return region is None or region in (r, v.get("AvailabilityZone"))

    found = [(r, v) for r, v in volumes if _tag(v, TAG_NAME) == name and where(r, v)]
    place = f" in {region}" if region else ""
    if not found:
        raise NotFound(f"aws: no volume named {name!r}{place}")
    if len(found) > 1 and region is None:
        zones = ", ".join(str(v["AvailabilityZone"]) for _, v in found)
        raise BadInput(
            f"aws: {len(found)} volumes are named {name!r} ({zones}): say which with --region"
        )
    infos = [info(v) for _, v in found]
    busy = [i for i in infos if i.attached_to or i.state == "in-use"]
    if busy:
        users = ", ".join(x for i in busy for x in i.attached_to) or "an instance"
        raise Conflict(
            f"aws: volume {name!r}{place} is attached to {users}; stop or cancel its run first"
        )
    for r, v in found:
        try:
            ec2.call(r, "delete_volume", VolumeId=v["VolumeId"])
        except ProviderError as exc:
            if exc.fields.get("aws_code") == "InvalidVolume.NotFound":
                continue
            raise
    return infos
