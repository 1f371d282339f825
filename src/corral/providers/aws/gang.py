"""EC2's gangs (a multi-node job, ``docs/multinode.md``): N instances of one type, each launched
on its own key (one ``run_instances`` per node, idempotent on its ``ClientToken``), in one
availability zone and, where the type allows it, the run's cluster placement group
(:mod:`.placement`), and in the run's own security group, which admits all TCP between
them and nothing of any other run (:mod:`.gang_group`). A mixin of
:class:`~corral.providers.aws.provider.AwsProvider`.

* **The head** (rank 0) goes where the offer says (a spot offer's zone; EC2's pick for an
  on-demand one), into the group, made at its launch. Its zone is kept in memory for the
  other nodes, and read back from EC2 (the run's rank-0 instance of the attempt, by its tags)
  after a restart.
* **The other nodes** go into the head's zone and group; they reach the head at its private
  address (:meth:`Ec2Gangs.gang_address`) on port 29500 (stage ``i`` on 29500 + ``i``).
* **A repair** (``keeps_members``: an EC2 instance, on-demand or spot, idles safely while a
  lost node is replaced) keeps the surviving instances, tagged with the attempt they were
  launched for: the replacement of a lost node goes into the zone of the run's live
  instances (the kept head's, for a lost member; the kept members', for a lost head), the
  same placement group and the run's security group, tagged with its rank. EC2 refusing it there (``InsufficientInstanceCapacity``:
  the group's rack is full) is :class:`NoCapacity`, and the controller relaunches the whole
  gang.
* **The end**: the controller terminates every node; :meth:`release_run` then deletes the
  placement group and the security group (:class:`NotYetTerminated` while an instance is
  still in one), and the leak sweep deletes the groups of runs that are over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from corral.errors import NoCapacity, ProviderError
from corral.providers.aws import placement
from corral.providers.aws.launch import TAG_ATTEMPT, TAG_OWNER, TAG_RANK, TAG_RUN
from corral.providers.base import Instance, SupportsGangs
from corral.wire.gang import GangRole

if TYPE_CHECKING:
    from corral.providers.aws.client import Ec2
    from corral.providers.aws.settings import AwsSettings

#: tries to see a head launched moments ago (EC2's listing is eventually consistent)
HEAD_LOOKS = 3


class Ec2Gangs(SupportsGangs):
    """EC2's gangs: a cluster placement group sets no size limit of its own (capacity and the
    account's vCPU quota do), so the spec's bound is the limit. Needs from the class it is
    mixed into: ``ec2``, ``settings``, ``sleep``, and the two dicts below, empty at first."""

    max_nodes: ClassVar[int] = 256
    gang_form: ClassVar[str] = (
        "one availability zone, a cluster placement group, a security group of the run's own"
    )
    launches_gangs: ClassVar[bool] = True
    keeps_members: ClassVar[bool] = True

    ec2: Ec2
    settings: AwsSettings
    sleep: Callable[[float], None]
    #: (run id, attempt) -> the zone of its gang's head, as launched by this process
    _head_zones: dict[tuple[str, int], str]
    #: (region, instance type) -> whether a cluster placement group takes it
    _cluster_types: dict[tuple[str, str], bool]

    def gang_port(self, run_id: str) -> int:
        """Torch's default port: the run's security group admits every TCP port between its
        nodes."""
        return placement.GANG_PORT

    def gang_address(self, head: Instance) -> str:
        """The head's private IPv4 address (recorded at launch; else asked of EC2)."""
        address = head.data.get("private_ip")
        if not address:
            region = head.data.get("region") or head.offer.region
            items = self.ec2.instances(region, InstanceIds=[head.instance_id])
            address = items[0].get("PrivateIpAddress") if items else None
        if not address:
            raise ProviderError(f"aws: {head.instance_id} has no private address (yet)")
        return str(address)

    # --- placement ----------------------------------------------------------------------------

    def _gang_place(
        self,
        region: str,
        run_id: str,
        attempt: int,
        gang: GangRole,
        instance_type: str,
        zone: str | None,
    ) -> tuple[str | None, str | None]:
        """(zone, placement group) of a node of a gang whose offer puts it in ``zone``: the
        head's zone for the other nodes, the kept nodes' for a head launched into a repaired
        gang, and the run's cluster group where the type takes one (made now if missing)."""
        gang_zone = (
            self._head_zone(region, run_id, attempt)
            if gang.rank > 0
            else self._kept_zone(region, run_id, attempt)
        )
        if gang_zone is not None:
            if zone is not None and zone != gang_zone:
                raise NoCapacity(
                    f"aws: node {gang.rank}'s offer is in {zone}, its gang's other nodes in "
                    f"{gang_zone}"
                )
            zone = gang_zone
        group = None
        if self._takes_cluster(region, instance_type):
            group = placement.ensure_group(self.ec2, region, run_id, self.settings.owner)
        return zone, group

    def _takes_cluster(self, region: str, instance_type: str) -> bool:
        known = self._cluster_types
        if (region, instance_type) not in known:
            known[region, instance_type] = placement.supports_cluster(
                self.ec2, region, instance_type
            )
        return known[region, instance_type]

    def _head_launched(self, run_id: str, attempt: int, zone: str | None) -> None:
        """Keep the zone of a gang's head for the nodes that join it."""
        if zone:
            self._head_zones[run_id, attempt] = zone

    def _live(self, region: str, run_id: str, rank: int | None = None) -> list[dict[str, Any]]:
        """The run's instances that are pending or running (of node ``rank`` only)."""
        filters = [
            {"Name": f"tag:{TAG_RUN}", "Values": [run_id]},
            {"Name": f"tag:{TAG_OWNER}", "Values": [self.settings.owner]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        if rank is not None:
            filters.append({"Name": f"tag:{TAG_RANK}", "Values": [str(rank)]})
        return self.ec2.instances(region, Filters=filters)

    def _kept_zone(self, region: str, run_id: str, attempt: int) -> str | None:
        """The zone of the nodes a repaired gang kept, for its new head (None: a new gang, no
        instance of the run is live; the teardown of the gang before waited for EC2 to say
        its instances were terminated)."""
        if (run_id, attempt) in self._head_zones:  # this head's earlier try
            return self._head_zones[run_id, attempt]
        return _zone_of(self._live(region, run_id), attempt)

    def _head_zone(self, region: str, run_id: str, attempt: int) -> str:
        """The zone of the head of attempt ``attempt`` of ``run_id``: its live rank-0
        instance, launched for that attempt or kept into it by a repair (then tagged with an
        earlier one); :class:`ProviderError` when it is not there: the gang cannot form."""
        zones = self._head_zones
        if (run_id, attempt) in zones:
            return zones[run_id, attempt]
        for i in range(HEAD_LOOKS):
            zone = _zone_of(self._live(region, run_id, rank=0), attempt)
            if zone:
                zones[run_id, attempt] = zone
                return zone
            if i + 1 < HEAD_LOOKS:
                self.sleep(1.0)
        raise ProviderError(
            f"aws: the head (node 0) of run {run_id}'s attempt {attempt} is not running in "
            f"{region}: the other nodes of its gang cannot join it"
        )


def _zone_of(items: list[dict[str, Any]], attempt: int) -> str | None:
    """The zone of the instance of ``items`` launched for ``attempt``, else of the newest
    (one kept from an earlier attempt)."""

    def order(item: dict[str, Any]) -> tuple[bool, str]:
        tags = {t.get("Key"): t.get("Value") for t in item.get("Tags") or []}
        return tags.get(TAG_ATTEMPT) == str(attempt), str(item.get("LaunchTime") or "")

    for item in sorted(items, key=order, reverse=True):
        zone = str((item.get("Placement") or {}).get("AvailabilityZone") or "")
        if zone:
            return zone
    return None
