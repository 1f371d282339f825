"""Named EBS volumes (``spec.volumes``) on AWS through moto: created in the instance's zone
when missing, attached at their own device and mounted before the job, found again (and the
offers pinned to their zone) by the next run, never deleted by a run's end or the leak sweep,
and listed and deleted by ``list_volumes``/``remove_volume``."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from corral.errors import Conflict, InfeasibleRequest, NotFound
from corral.providers.aws import named
from corral.providers.aws.userdata import extract_payload
from corral.providers.base import InstanceState, Requirements, VolumeRequest
from support.waiting import wait_until

from .test_provider import A10G, bootstrap, wait_status


def needs(mount: Path, name: str = "datasets", **req: object) -> Requirements:
    vol = VolumeRequest(name=name, size_gb=30, mount=str(mount))
    return A10G.model_copy(update={"volumes": [vol], **req})


def on_demand(p, req: Requirements):
    return next(
        o
        for o in p.offers(req.model_copy(update={"spot": False}))
        if o.details["instance_type"] == "g5.xlarge"
    )


def terminated(p, inst) -> bool:
    try:
        p.terminate(inst)
    except Exception:
        return False
    return True


def test_a_named_volume_is_created_attached_kept_and_found_by_the_next_run(
    make_provider, aws, runner, tmp_path
):
    p = make_provider()
    mount = tmp_path / "mnt" / "datasets"
    req = needs(mount)
    assert {o.region for o in p.offers(req)} == {"us-east-1"}  # none exists: anywhere
    offer = on_demand(p, req)
    assert offer.details["volumes"] == [req.volumes[0].model_dump()]
    run = "rnv" + uuid.uuid4().hex[:6]
    first = p.launch(offer, bootstrap(tmp_path, f"{run}-a1", f"echo hi > {mount}/x"), f"{run}-a1")
    [vol] = p.list_volumes()
    assert (vol.name, vol.size_gb, vol.region) == ("datasets", 30, first.data["zone"])
    ec2 = aws.client()
    item = aws.instances(InstanceIds=[first.instance_id])[0]
    assert {t["Key"]: t["Value"] for t in item["Tags"]}[named.TAG_MOUNTS] == (
        f"{vol.volume_id}=/dev/sdg"
    )
    raw = ec2.describe_instance_attribute(InstanceId=first.instance_id, Attribute="userData")
    script = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert f"named volume {vol.volume_id}" in script and f'mount "$DEV" {mount}' in script
    assert [m.volume_id for m in extract_payload(script).mounts] == [vol.volume_id]
    wait_status(p, first, {InstanceState.RUNNING})
    [vol] = p.list_volumes()
    assert vol.attached_to == [first.instance_id] and vol.state == "in-use"
    wait_until((mount / "x").exists, 30, message="the job to write on the volume")
    with pytest.raises(Conflict, match="attached to"):
        p.remove_volume("datasets")
    wait_until(lambda: terminated(p, first), 30, 0.05, "the instance to go")
    wait_until(lambda: p.list_volumes()[0].state == "available", 30, 0.1, "the volume to detach")

    p.release_run(run)  # the run is over: its own data volumes go, named ones stay
    assert p.sweep([], [], min_age_s=0) == []
    assert [v.volume_id for v in p.list_volumes()] == [vol.volume_id]

    offers = p.offers(req)  # it exists now: only where it is
    assert offers and all(o.details.get("volume_zone") == vol.region for o in offers)
    assert all(o.details["zone"] == vol.region for o in offers if o.spot)
    second = p.launch(on_demand(p, req), bootstrap(tmp_path, f"{run}-b1"), f"{run}-b1")
    assert second.data["zone"] == vol.region
    assert [v.volume_id for v in p.list_volumes()] == [vol.volume_id]  # the same disk
    wait_status(p, second, {InstanceState.RUNNING})
    assert (runner.volume_dir(vol.volume_id) / "x").read_text() == "hi\n"
    wait_until(lambda: terminated(p, second), 30, 0.05, "the instance to go")
    wait_until(lambda: p.list_volumes()[0].state == "available", 30, 0.1, "the volume to detach")
    [removed] = p.remove_volume("datasets", region="us-east-1")
    assert removed.volume_id == vol.volume_id and p.list_volumes() == []
    with pytest.raises(NotFound, match="no volume named 'datasets'"):
        p.remove_volume("datasets")


def test_volumes_in_two_zones_cannot_be_mounted_together(make_provider, aws, tmp_path):
    p = make_provider()
    ec2 = aws.client()
    for name, zone in (("a", "us-east-1a"), ("b", "us-east-1b")):
        ec2.create_volume(
            AvailabilityZone=zone,
            Size=10,
            TagSpecifications=[
                {
                    "ResourceType": "volume",
                    "Tags": [
                        {"Key": named.TAG_NAME, "Value": name},
                        {"Key": named.TAG_OWNER, "Value": p.settings.owner},
                    ],
                }
            ],
        )
    two = A10G.model_copy(
        update={
            "volumes": [
                VolumeRequest(name="a", size_gb=10, mount="/a"),
                VolumeRequest(name="b", size_gb=10, mount="/b"),
            ]
        }
    )
    with pytest.raises(InfeasibleRequest, match="different availability zones"):
        p.offers(two)
    only_a = two.model_copy(update={"volumes": two.volumes[:1]})
    offers = p.offers(only_a)
    assert offers and {o.details["zone"] for o in offers if o.spot} <= {"us-east-1a"}
    with pytest.raises(InfeasibleRequest, match="volumes are in us-east-1a"):
        p.offers(only_a.model_copy(update={"regions": ["us-west-2"], "spot": False}))


def test_volumes_made_since_the_offers_were_listed_pin_the_launch(make_provider, aws, tmp_path):
    from corral.errors import NoCapacity

    p = make_provider()
    req = needs(tmp_path / "mnt" / "late")
    spot = [o for o in p.offers(req.model_copy(update={"spot": True})) if o.details["zone"]]
    od = on_demand(p, req)
    zone = "us-east-1b"
    aws.client().create_volume(
        AvailabilityZone=zone,
        Size=30,
        TagSpecifications=[
            {
                "ResourceType": "volume",
                "Tags": [
                    {"Key": named.TAG_NAME, "Value": "datasets"},
                    {"Key": named.TAG_OWNER, "Value": p.settings.owner},
                ],
            }
        ],
    )
    elsewhere = next(o for o in spot if o.details["zone"] != zone)
    key = "rlate" + uuid.uuid4().hex[:6]
    with pytest.raises(NoCapacity, match=f"volumes are in {zone} now"):
        p.launch(elsewhere, bootstrap(tmp_path, f"{key}-a1"), f"{key}-a1")
    inst = p.launch(od, bootstrap(tmp_path, f"{key}-a2"), f"{key}-a2")
    assert inst.data["zone"] == zone and len(p.list_volumes()) == 1
    wait_until(lambda: terminated(p, inst), 30, 0.05, "the instance to go")
