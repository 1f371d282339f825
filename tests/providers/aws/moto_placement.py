"""EC2's placement groups on the tests' moto server: moto 5.2 has none (``CreatePlacementGroup``,
``DescribePlacementGroups`` and ``DeletePlacementGroup`` answer "not implemented", and
``RunInstances`` drops ``Placement.GroupName``). :func:`install` adds them to moto's EC2 in this
process (the tests' moto server runs in a thread of it), keeping the books here:

* a group is created once per account and region (``InvalidPlacementGroup.Duplicate``), with
  its tags; described by ``GroupNames`` or by the filters ``group-name``, ``strategy``,
  ``state`` and ``tag:<key>``; deleted only when no instance that is not terminated is in it
  (``InvalidPlacementGroup.InUse``; a missing one: ``InvalidPlacementGroup.Unknown``);
* ``RunInstances`` into a group that does not exist is refused
  (``InvalidPlacementGroup.Unknown``), into a cluster group whose instances are in another zone
  too (a cluster group lives in one zone), and past the group's capacity when a test set one
  (:meth:`PlacementBooks.limit`: ``InsufficientInstanceCapacity``, what EC2 answers when a
  cluster group's rack is full); the instance then shows its group in ``Placement.GroupName``.

What EC2 does beyond that (the physical packing, a launch without a zone placed in the
group's) is not modelled; docs/providers.md's assumptions list these.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from moto.core.responses import ActionResult, EmptyResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

LIVE = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass
class PlacementBooks:
    """The placement groups of the fake, by (account, region, name)."""

    groups: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: group name -> the most instances it takes (a test's "no capacity")
    capacity: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def limit(self, name: str, instances: int) -> None:
        """The group ``name`` takes at most ``instances`` instances from now on."""
        self.capacity[name] = instances


BOOKS = PlacementBooks()
_installed = threading.Lock()


def _where(resp: Any) -> tuple[str, str]:
    return str(resp.current_account), str(resp.region)


def _members(resp: Any, name: str) -> list[Any]:
    """The instances in group ``name`` that are not terminated."""
    return [
        i
        for r in resp.ec2_backend.reservations.values()
        for i in r.instances
        if getattr(i._placement, "group_name", "") == name and i.state in LIVE
    ]


def _unknown(name: str) -> EC2ClientError:
    return EC2ClientError(
        "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown."
    )


def create_placement_group(self: Any) -> ActionResult:
    name = str(self._get_param("GroupName") or "")
    strategy = str(self._get_param("Strategy") or "")
    if not name or len(name) > 255:
        raise EC2ClientError("InvalidParameterValue", f"Invalid placement group name {name!r}")
    if strategy not in ("cluster", "spread", "partition"):
        raise EC2ClientError("InvalidParameterValue", f"Invalid strategy {strategy!r}")
    account, region = _where(self)
    tags = self._parse_tag_specification().get("placement-group", {})
    with BOOKS.lock:
        if (account, region, name) in BOOKS.groups:
            raise EC2ClientError(
                "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
            )
        group = {
            "GroupName": name,
            "GroupId": "pg-" + uuid.uuid4().hex[:17],
            "Strategy": strategy,
            "State": "available",
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }
        BOOKS.groups[account, region, name] = group
    return ActionResult({"PlacementGroup": group})


def _passes(group: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    for key, values in filters.items():
        if key.startswith("tag:"):
            value = tags.get(key[4:])
        elif key in ("group-name", "strategy", "state"):
            value = group[{"group-name": "GroupName"}.get(key, key.capitalize())]
        else:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{key}' is invalid")
        if value not in values:
            return False
    return True


def describe_placement_groups(self: Any) -> ActionResult:
    account, region = _where(self)
    names = self._get_param("GroupNames", [])
    filters = self._filters_from_querystring()
    with BOOKS.lock:
        mine = {n: g for (a, r, n), g in BOOKS.groups.items() if (a, r) == (account, region)}
    for name in names:
        if name not in mine:
            raise _unknown(name)
    found = [
        g for n, g in sorted(mine.items()) if (not names or n in names) and _passes(g, filters)
    ]
    return ActionResult({"PlacementGroups": found})


def delete_placement_group(self: Any) -> ActionResult:
    name = str(self._get_param("GroupName") or "")
    account, region = _where(self)
    with BOOKS.lock:
        if (account, region, name) not in BOOKS.groups:
            raise _unknown(name)
        if _members(self, name):
            raise EC2ClientError(
                "InvalidPlacementGroup.InUse", f"The Placement Group '{name}' is in use."
            )
        del BOOKS.groups[account, region, name]
    return EmptyResult()


def _run_instances_in_groups(original: Any) -> Any:
    def run_instances(self: Any) -> ActionResult:
        name = self._get_param("Placement.GroupName")
        if not name:
            return original(self)
        account, region = _where(self)
        with BOOKS.lock:
            group = BOOKS.groups.get((account, region, name))
            if group is None:
                raise _unknown(name)
            members = _members(self, name)
            count = int(self._get_param("MinCount", if_none="1"))
            room = BOOKS.capacity.get(name)
            if room is not None and len(members) + count > room:
                raise EC2ClientError(
                    "InsufficientInstanceCapacity",
                    f"We currently do not have sufficient capacity in placement group {name}.",
                )
            zone = self._get_param("Placement.AvailabilityZone")
            zones = {m._placement.zone for m in members}
            if group["Strategy"] == "cluster" and zones and (zone or "") not in zones:
                raise EC2ClientError(
                    "InvalidParameterValue",
                    f"Placement group {name} is in {sorted(zones)[0]}: an instance in "
                    f"{zone or 'no zone'} cannot join it",
                )
            result = original(self)
            for instance in result.result.instances:
                instance._placement.group_name = name
        return result

    run_instances.__wrapped__ = original  # type: ignore[attr-defined]
    return run_instances


def install() -> PlacementBooks:
    """Add placement groups to moto's EC2 in this process (once); their books."""
    with _installed:
        if not hasattr(EC2Response.run_instances, "__wrapped__"):
            EC2Response.create_placement_group = create_placement_group  # type: ignore[attr-defined]
            EC2Response.describe_placement_groups = describe_placement_groups  # type: ignore[attr-defined]
            EC2Response.delete_placement_group = delete_placement_group  # type: ignore[attr-defined]
            EC2Response.run_instances = _run_instances_in_groups(EC2Response.run_instances)  # type: ignore[method-assign]
    return BOOKS
