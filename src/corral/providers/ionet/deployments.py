"""IO.net deployments and their containers as the CaaS API returns them, and how they map onto
:class:`InstanceState`.

Status strings are compared case-insensitively (third-party fixtures show ``RUNNING`` where
the spec's enum says ``running``), and unknown ones map to UNKNOWN::

    deployment status          containers                               -> InstanceState
    (no such deployment)       -                                           TERMINATED
    deployment requested       -                                           PROVISIONING
    running                    one running with its public URL, the
                               container first seen (or none seen yet)     RUNNING
    running                    another container than the first seen       PREEMPTED
    running                    none (after one ran)                        PREEMPTED
    running                    the first seen, not running (any more)      UNKNOWN
    running                    none yet / not running yet                  PROVISIONING
    completed                  -                                           PREEMPTED
    failed                     -                                           FAILED
    termination requested,
    destroyed                  -                                           TERMINATED

IO.net documents no preemption (UNCONFIRMED): a container replaced by another (a new
``container_id`` or ``device_id``), or gone from a running deployment, is read as the node
having failed, and the run recovers on a new deployment from its last checkpoint. A
deployment that ``completed`` before corral ended it ran out of its prepaid hours (the
provider extends running ones): it is recovered the same way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.base import InstanceState


def word(value: Any) -> str:
    return " ".join(str(value or "").split()).lower()


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Deployment(_Lenient):
    id: str
    status: str = ""
    name: str | None = None
    created_at: str | None = None
    completed_percent: float | None = None
    compute_minutes_remaining: float | None = None
    hardware_name: str | None = None
    hardware_id: int | None = None
    gpus_per_container: int | None = None
    locations: list[dict[str, Any]] = Field(default_factory=list)
    container_config: dict[str, Any] = Field(default_factory=dict)

    @property
    def state(self) -> str:
        return word(self.status)

    def env(self, name: str) -> str | None:
        value = (self.container_config.get("env_variables") or {}).get(name)
        return value if isinstance(value, str) else None


class Worker(_Lenient):
    container_id: str = ""
    device_id: str = ""
    status: str = ""
    public_url: str | None = None
    created_at: str | None = None

    @property
    def state(self) -> str:
        return word(self.status)

    @property
    def identity(self) -> str:
        return f"{self.device_id}/{self.container_id}"


def deployment_state(
    dep: Deployment | None, worker: Worker | None, *, first: str | None
) -> tuple[InstanceState, str]:
    """The deployment's :class:`InstanceState` and a one-line detail (module table)."""
    if dep is None:
        return InstanceState.TERMINATED, "no such deployment"
    state = dep.state
    if state == "deployment requested":
        return InstanceState.PROVISIONING, "deployment requested"
    if state in ("termination requested", "destroyed"):
        return InstanceState.TERMINATED, state
    if state == "failed":
        return InstanceState.FAILED, "the deployment failed"
    if state == "completed":
        return InstanceState.PREEMPTED, "the deployment completed: its prepaid hours ran out"
    if state != "running":
        return InstanceState.UNKNOWN, f"unknown deployment status {dep.status!r}"
    if worker is not None and first and worker.identity != first:
        return (
            InstanceState.PREEMPTED,
            f"the container was replaced ({first} -> {worker.identity}): its node failed",
        )
    if worker is not None and worker.state == "running" and worker.public_url:
        return InstanceState.RUNNING, f"running on device {worker.device_id or '?'}"
    if worker is None and first:
        return InstanceState.PREEMPTED, f"the container {first} is gone: its node failed"
    if worker is not None and first:  # the same container, not running: ask again
        return InstanceState.UNKNOWN, f"container {worker.state or 'in no state'}"
    return InstanceState.PROVISIONING, f"container {worker.state if worker else 'not started'}"
