"""What EC2 can give one multi-node job (a gang, ``docs/multinode.md``): instances of one type in
one availability zone and a cluster placement group, reaching one another through a
security-group rule between them. The gang launch itself (the placement group, the rule, the
members' launches and their teardown) is to come here, beside the provider."""

from __future__ import annotations

from typing import ClassVar

from corral.providers.base import SupportsGangs


class Ec2Gangs(SupportsGangs):
    """EC2's gangs: a cluster placement group sets no size limit of its own (capacity and the
    account's vCPU quota do), so the spec's bound is the limit."""

    max_nodes: ClassVar[int] = 256
    gang_form: ClassVar[str] = (
        "one availability zone, a cluster placement group, a security-group rule between the nodes"
    )
