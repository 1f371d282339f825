"""Housekeeping of the AWS provider (a mixin of :class:`AwsProvider`): the leak sweep, the
persistent data volumes, the gangs' placement groups and security groups, and console logs."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from corral.errors import NotYetTerminated, ProviderError
from corral.providers.aws import gang_group, named, placement, volumes
from corral.providers.aws.launch import TAG_RUN
from corral.providers.aws.mapping import tags
from corral.providers.base import Instance, VolumeInfo

if TYPE_CHECKING:
    from corral.providers.aws.client import Ec2
    from corral.providers.aws.settings import AwsSettings

log = logging.getLogger("corral.providers.aws")
#: how long a run's end waits for EC2 to let its security group go once no instance is in it
#: (the network interfaces of instances terminated moments ago); then the leak sweep deletes it
GROUP_RELEASE_WAIT_S = 300.0


class Housekeeping:
    """Needs from the class it is mixed into: ``ec2``, ``settings``, ``clock``, ``list_instances``,
    ``terminate`` and ``_scan`` (see :class:`~corral.providers.aws.provider.AwsProvider`), and
    ``_groups_refused``, an empty dict at first."""

    ec2: Ec2
    settings: AwsSettings
    clock: Callable[[], float]
    list_instances: Callable[[], list[Instance]]
    terminate: Callable[[Instance], None]
    _scan: Callable[..., list[Any]]
    #: security group id -> when EC2 first refused to delete it with no instance in it
    _groups_refused: dict[str, float]

    def sweep(
        self,
        active_keys: Iterable[str],
        active_runs: Iterable[str] | None = None,
        *,
        min_age_s: float = 300.0,
    ) -> list[str]:
        """Terminate this controller's instances whose key is not in ``active_keys`` (their
        run is over, or was never recorded) and that are older than ``min_age_s`` (a launch
        in flight is not a leak); with ``active_runs``, also delete the unattached data
        volumes (:meth:`sweep_volumes`), the empty placement groups (:meth:`sweep_placement`)
        and the empty security groups (:meth:`sweep_security_groups`) of runs not in it.
        Returns the instance ids asked to terminate, the volume ids and the placement and
        security group names deleted."""
        swept = self._sweep_instances(set(active_keys), min_age_s)
        if active_runs is not None:
            runs = set(active_runs)
            try:
                swept += self.sweep_volumes(runs, min_age_s=min_age_s)
            except ProviderError as e:  # the next sweep tries again
                log.warning("aws: volume sweep failed: %s", e.message)
            try:
                swept += self.sweep_placement(runs)
            except ProviderError as e:
                log.warning("aws: placement group sweep failed: %s", e.message)
            try:
                swept += self.sweep_security_groups(runs)
            except ProviderError as e:
                log.warning("aws: security group sweep failed: %s", e.message)
        return swept

    def _sweep_instances(self, active: set[str], min_age_s: float) -> list[str]:
        now = self.clock()
        swept = []
        for inst in self.list_instances():
            if inst.key in active or inst.data.get("state") == "shutting-down":
                continue
            if inst.created_at is not None and now - inst.created_at.timestamp() < min_age_s:
                continue
            try:
                self.terminate(inst)
            except NotYetTerminated:
                pass
            log.warning("aws: leak sweep terminated %s (key %s)", inst.instance_id, inst.key)
            swept.append(inst.instance_id)
        return swept

    # --- volumes and logs -------------------------------------------------------------------

    def volumes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """This controller's live data volumes (of one run, or all) in every region."""
        owner = self.settings.owner
        return self._scan(
            lambda r: [{**v, "Region": r} for v in volumes.run_volumes(self.ec2, r, run_id, owner)]
        )

    def release_volumes(self, run_id: str) -> list[str]:
        """Delete the run's data volumes (call when the run is over). :class:`NotYetTerminated`
        while an instance still holds one."""
        deleted = []
        for vol in self.volumes(run_id):
            volumes.delete(self.ec2, vol["Region"], str(vol["VolumeId"]))
            deleted.append(str(vol["VolumeId"]))
        return deleted

    def sweep_volumes(self, active_runs: Iterable[str], *, min_age_s: float = 300.0) -> list[str]:
        """Delete this controller's data volumes of runs not in ``active_runs`` (a run that
        ended without :meth:`release_volumes`, or one the store no longer knows): unattached
        ones only, older than ``min_age_s`` (a run launched after ``active_runs`` was read may
        have just made its volume). One volume that cannot be deleted is logged and skipped.
        Returns the volume ids deleted."""
        active = set(active_runs)
        now = self.clock()
        deleted = []
        for vol in self.volumes():
            run = tags(vol).get(TAG_RUN)
            if run in active or vol.get("State") != "available":
                continue
            created = vol.get("CreateTime")
            if isinstance(created, datetime) and now - created.timestamp() < min_age_s:
                continue
            try:
                volumes.delete(self.ec2, vol["Region"], str(vol["VolumeId"]))
            except ProviderError as e:
                log.warning("aws: cannot delete volume %s: %s", vol["VolumeId"], e.message)
                continue
            log.warning("aws: volume sweep deleted %s (run %s)", vol["VolumeId"], run)
            deleted.append(str(vol["VolumeId"]))
        return deleted

    # --- the gangs' placement groups (gang.py) ---------------------------------------------

    def _placement_groups(self, run_id: str | None = None) -> list[tuple[str, str, str]]:
        """(region, group name, run id) of this controller's placement groups (of one run)."""
        owner = self.settings.owner
        return self._scan(
            lambda r: [
                (r, str(g["GroupName"]), tags(g).get(TAG_RUN, ""))
                for g in placement.groups(self.ec2, r, run_id=run_id, owner=owner)
            ]
        )

    def release_placement(self, run_id: str) -> list[str]:
        """Delete the run's placement group (call when the run is over).
        :class:`NotYetTerminated` while an instance is still in it."""
        found = self._placement_groups(run_id)
        for region, name, _ in found:
            placement.delete_group(self.ec2, region, name)
        return [name for _, name, _ in found]

    def sweep_placement(self, active_runs: Iterable[str]) -> list[str]:
        """Delete this controller's placement groups of runs not in ``active_runs`` (a run
        that ended without :meth:`release_placement`); one still holding an instance is left
        for the next sweep. Returns the names deleted."""
        active = set(active_runs)
        deleted = []
        for region, name, run in self._placement_groups():
            if run in active:
                continue
            try:
                placement.delete_group(self.ec2, region, name)
            except ProviderError as e:  # NotYetTerminated: in use; anything else: next time
                log.info("aws: placement group %s not deleted yet: %s", name, e.message)
                continue
            log.warning("aws: sweep deleted placement group %s (run %s)", name, run)
            deleted.append(name)
        return deleted

    # --- the gangs' security groups (gang_group.py) -----------------------------------------

    def _run_groups(self, run_id: str | None = None) -> list[tuple[str, str, str, str]]:
        """(region, group id, group name, run id) of this controller's gang security groups
        (of one run)."""
        owner = self.settings.owner
        return self._scan(
            lambda r: [
                (r, str(g["GroupId"]), str(g["GroupName"]), tags(g).get(TAG_RUN, ""))
                for g in gang_group.groups(self.ec2, r, run_id=run_id, owner=owner)
            ]
        )

    def release_security_groups(self, run_id: str) -> list[str]:
        """Delete the run's security group (call when its instances are terminated).
        :class:`NotYetTerminated` while an instance is still in it, and for up to
        :data:`GROUP_RELEASE_WAIT_S` while EC2 still refuses with none in it; past that the
        run's end goes on and the leak sweep deletes the group."""
        deleted = []
        for region, group_id, name, _ in self._run_groups(run_id):
            if gang_group.delete(self.ec2, region, group_id, name):
                self._groups_refused.pop(group_id, None)
                deleted.append(name)
                continue
            first = self._groups_refused.setdefault(group_id, self.clock())
            if self.clock() - first < GROUP_RELEASE_WAIT_S:
                raise NotYetTerminated(f"aws: security group {name} is still in use")
            log.warning(
                "aws: security group %s (%s) of run %s is still in use with no instance in it; "
                "the leak sweep deletes it once EC2 lets it go",
                name,
                group_id,
                run_id,
            )
        return deleted

    def sweep_security_groups(self, active_runs: Iterable[str]) -> list[str]:
        """Delete this controller's gang security groups of runs not in ``active_runs`` (a run
        that ended without :meth:`release_security_groups`); one still in use is left for the
        next sweep. Returns the names deleted."""
        active = set(active_runs)
        deleted = []
        for region, group_id, name, run in self._run_groups():
            if run in active:
                continue
            try:
                gone = gang_group.delete(self.ec2, region, group_id, name)
            except ProviderError as e:  # NotYetTerminated: in use; anything else: next time
                log.info("aws: security group %s not deleted yet: %s", name, e.message)
                continue
            if not gone:
                log.info("aws: security group %s not deleted yet: still in use", name)
                continue
            self._groups_refused.pop(group_id, None)
            log.warning("aws: sweep deleted security group %s (run %s)", name, run)
            deleted.append(name)
        return deleted

    # --- named volumes (spec.volumes) -------------------------------------------------------

    def _named_in(self, region: str) -> list[dict[str, Any]]:
        return named.find(self.ec2, region, self.settings.owner)

    def _attach_named(self, region: str, item: dict[str, Any]) -> bool:
        """Attach the instance's named volumes (its ``corral:mounts`` tag); True once all
        are attached to it."""
        done = True
        for volume_id, device in named.parse_mounts_tag(tags(item).get(named.TAG_MOUNTS)):
            ok = volumes.shown_attached(item, volume_id) or volumes.attach(
                self.ec2, region, volume_id, item["InstanceId"], device=device
            )
            done = done and ok
        return done

    def list_volumes(self) -> list[VolumeInfo]:
        """The owner's named volumes in every region corral may use."""
        return self._scan(lambda r: [named.info(v) for v in self._named_in(r)])

    def remove_volume(self, name: str, region: str | None = None) -> list[VolumeInfo]:
        found = self._scan(lambda r: [(r, v) for v in self._named_in(r)])
        return named.remove(self.ec2, found, name, region)

    def logs(self, instance: Instance, tail: int = 200) -> str:
        region = instance.data.get("region") or instance.offer.region
        text = self.console(region, instance.instance_id)
        return "\n".join(text.splitlines()[-tail:])

    def console(self, region: str, instance_id: str) -> str:
        """The machine's console output: EC2's ``get_console_output``, or the console of the
        machine a test host plays, once it booted."""
        runner = getattr(self, "runner", None)
        played = runner.console(instance_id) if runner is not None else None
        if played is not None:
            return played
        out = (
            self.ec2.call(region, "get_console_output", InstanceId=instance_id, Latest=True).get(
                "Output"
            )
            or ""
        )
        try:
            return base64.b64decode(out, validate=True).decode(errors="replace")
        except ValueError:
            return out  # some endpoints answer in plain text
