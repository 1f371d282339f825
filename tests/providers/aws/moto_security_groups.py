"""EC2's refusal to delete a security group in use, on the tests' moto server: moto 5.2 deletes
any group it is asked to (``DeleteSecurityGroup`` has a TODO there), where EC2 answers
``DependencyViolation`` while the group is associated with an instance, or referenced by
another security group (EC2 API Reference, DeleteSecurityGroup). :func:`install` makes moto's
EC2 in this process refuse it so:

* while an instance that is not terminated (pending, running, shutting-down, stopping,
  stopped) has the group;
* while a rule of another group (ingress or egress) names it; a group's rule naming the group
  itself does not keep it.

moto's network interfaces are not counted: moto keeps a terminated instance's primary network
interface, which EC2 deletes with the instance. docs/providers.md's assumptions list this.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

LIVE = ("pending", "running", "stopping", "stopped", "shutting-down")
_installed = threading.Lock()


def _in_use(backend: Any, group_id: str) -> str | None:
    """What keeps the group ``group_id``: an instance or another group, or None."""
    for reservation in list(backend.reservations.values()):
        for instance in reservation.instances:
            if instance.state in LIVE and any(g.id == group_id for g in instance.security_groups):
                return str(instance.id)
    for groups in list(backend.groups.values()):
        for other in list(groups.values()):
            if other.id == group_id:
                continue
            for rule in itertools.chain(other.ingress_rules, other.egress_rules):
                if (rule.source_group or {}).get("GroupId") == group_id:
                    return str(other.id)
    return None


def _refusing_in_use(original: Any) -> Any:
    def delete_security_group(self: Any) -> ActionResult:
        ref = self._get_param("GroupId") or self._get_param("GroupName")
        group = self.ec2_backend.get_security_group_by_name_or_id(ref) if ref else None
        if group is not None and (holder := _in_use(self.ec2_backend, group.id)):
            raise EC2ClientError(
                "DependencyViolation",
                f"resource {group.id} has a dependent object ({holder})",
            )
        return original(self)

    delete_security_group.__wrapped__ = original  # type: ignore[attr-defined]
    return delete_security_group


def install() -> None:
    """Make moto's EC2 in this process refuse to delete a group in use (once)."""
    with _installed:
        if not hasattr(EC2Response.delete_security_group, "__wrapped__"):
            EC2Response.delete_security_group = _refusing_in_use(  # type: ignore[method-assign]
                EC2Response.delete_security_group
            )
