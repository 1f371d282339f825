"""What the worker pool can give one multi-node job (a gang, ``docs/multinode.md``): N workers
on N distinct hosts, reserved together or not at all. The reservation itself is to come here,
beside the provider."""

from __future__ import annotations

from typing import ClassVar

from corral.providers.base import SupportsGangs


class PoolGangs(SupportsGangs):
    """The pool's gangs: at most as many nodes as the pool has hosts, which only a launch can
    count; 64 is the most one job may ask of it."""

    max_nodes: ClassVar[int] = 64
    gang_form: ClassVar[str] = "N workers on N hosts, reserved together"
