"""SaladCloud container groups and instances as the API returns them, and how they map onto
:class:`InstanceState`.

The models ignore fields they do not know (SaladCloud adds fields to its answers). One corral
attempt is one container group with one replica; :func:`group_state` reads its state with
what corral remembers of it (:class:`~corral.providers.common.machine_memory.MachineMemory`)::

    current_state.status  instance (the replica)                  remembered   -> InstanceState
    (no such group)       -                                       -               TERMINATED
    pending               -                                       -               PROVISIONING
    failed                -                                       -               FAILED
    succeeded             -                                       -               FAILED
    stopped               -                                       stopped by us   STOPPED
    stopped               -                                       not by us       FAILED
    deploying, running    running, on the machine first seen     -               RUNNING
    deploying, running    running on another machine             a machine       PREEMPTED
    deploying, running    allocating/downloading/creating/none   ran before      PREEMPTED
    deploying, running    allocating/downloading/creating/none   never ran       PROVISIONING
    deploying, running    stopping                                stopped by us   STOPPED
    anything else         -                                       -               UNKNOWN

SaladCloud sends no preemption notice: a node that goes offline, a higher priority that takes
it, a failing liveness probe, a full disk each put the replica back to ``allocating`` and on
another machine. Either sign after the replica once ran is a preemption; the run resumes from
its last checkpoint in object storage on a new group.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.base import InstanceState

_STARTING = {"allocating", "downloading", "creating"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StateCounts(_Lenient):
    allocating_count: int = 0
    creating_count: int = 0
    running_count: int = 0
    stopping_count: int = 0


class CurrentState(_Lenient):
    status: str = ""
    description: str | None = None
    instance_status_counts: StateCounts = Field(default_factory=StateCounts)


class ContainerGroup(_Lenient):
    id: str = ""
    name: str
    display_name: str | None = None
    container: dict[str, Any] = Field(default_factory=dict)
    #: the group's priority: at the top level of SaladCloud's answer (its ``container`` has
    #: none, though a create sends it there)
    priority: str | None = None
    networking: dict[str, Any] | None = None
    current_state: CurrentState = Field(default_factory=CurrentState)
    replicas: int = 0
    version: int = 1
    create_time: str | None = None
    update_time: str | None = None

    @property
    def status(self) -> str:
        return (self.current_state.status or "").strip().lower()

    @property
    def counts(self) -> StateCounts:
        return self.current_state.instance_status_counts

    def env(self, name: str) -> str | None:
        value = (self.container.get("environment_variables") or {}).get(name)
        return value if isinstance(value, str) else None

    @property
    def dns(self) -> str | None:
        dns = (self.networking or {}).get("dns")
        return dns if isinstance(dns, str) and dns else None


class SaladInstance(_Lenient):
    id: str = Field("", alias="id")
    machine_id: str = ""
    state: str = ""
    update_time: str | None = None
    version: int | None = None
    ready: bool | None = None
    started: bool | None = None

    @property
    def word(self) -> str:
        return (self.state or "").strip().lower()


def group_state(
    group: ContainerGroup | None,
    instance: SaladInstance | None,
    *,
    first_machine: str | None,
    ran_before: bool,
    stopped_by_corral: bool,
) -> tuple[InstanceState, str]:
    """The group's :class:`InstanceState` and a one-line detail (see the module's table)."""
    if group is None:
        return InstanceState.TERMINATED, "no such container group"
    status = group.status
    why = f": {group.current_state.description}" if group.current_state.description else ""
    if status == "pending":
        return InstanceState.PROVISIONING, "SaladCloud is preparing the image"
    if status == "failed":
        return InstanceState.FAILED, "the container group failed to deploy" + why
    if status == "succeeded":
        return InstanceState.FAILED, "the container exited (group succeeded)" + why
    if status == "stopped":
        if stopped_by_corral:
            return InstanceState.STOPPED, "stopped by corral"
        return InstanceState.FAILED, "the container group was stopped outside corral"
    if status not in ("deploying", "running"):
        return InstanceState.UNKNOWN, f"unknown container group status {status or '(none)'!r}"
    word = instance.word if instance is not None else ""
    if word == "running":
        if first_machine and instance and instance.machine_id != first_machine:
            return (
                InstanceState.PREEMPTED,
                f"interrupted: the instance moved from machine {first_machine} to "
                f"{instance.machine_id or 'another one'}",
            )
        return (
            InstanceState.RUNNING,
            f"running on machine {instance.machine_id if instance else '?'}",
        )
    if word == "stopping" and stopped_by_corral:
        return InstanceState.STOPPED, "stopped by corral"
    if ran_before:
        where = f" (was on machine {first_machine})" if first_machine else ""
        return (
            InstanceState.PREEMPTED,
            f"interrupted: the instance went back to {word or 'allocating'}{where}",
        )
    if word in _STARTING or not word:
        return InstanceState.PROVISIONING, f"instance {word or 'allocating'}"
    return InstanceState.UNKNOWN, f"unknown instance state {word!r}"
