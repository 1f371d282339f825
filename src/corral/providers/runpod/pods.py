"""RunPod pods and network volumes as the API returns them, and how each pod state maps onto
InstanceState.

:class:`Pod` reads the REST v2 pod object (``status``, ``cost``, ``env`` as an object,
``runtime`` null unless RUNNING) and the pod GraphQL answers with (``desiredStatus``,
``costPerHr``). It ignores fields it does not know: RunPod adds fields to its answers, and an
answer must not break the provider (our own models, the settings, forbid unknown keys).

State mapping (:func:`pod_state`)::

    status (v2) / desiredStatus      spot   stopped by corral  ->  InstanceState
    RUNNING (the container is up)    any    -                      RUNNING
    PROVISIONING, STARTING,
      CREATED, RESTARTING            any    -                      PROVISIONING
    EXITED, PAUSED                   any    yes                    STOPPED
    EXITED, PAUSED                   yes    no                     PREEMPTED
    EXITED, PAUSED                   no     no                     FAILED
    ERROR, DEAD                      any    -                      FAILED
    TERMINATED, or no such pod       any    -                      TERMINATED
    anything else                    any    -                      UNKNOWN

A v2 pod does not say whether it is a spot pod; the caller does (the offer it was launched
for). A spot pod that leaves RUNNING without corral asking was interrupted: RunPod keeps it
(its disk survives, ``podBidResume`` could restart it) as EXITED. An on-demand pod stopped by
RunPod itself (say the balance reached $0) runs nothing more for this attempt, so it is
FAILED; the controller recovers the run and terminates the pod.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from corral.providers.base import InstanceState

_PROVISIONING = {"CREATED", "PROVISIONING", "STARTING", "RESTARTING"}
_STOPPED = {"EXITED", "PAUSED"}
_FAILED = {"DEAD", "ERROR"}


class Pod(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    name: str = ""
    #: REST v2's status (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED)
    status: str = ""
    #: GraphQL's word for it (a spot create's answer)
    desired_status: str = Field("", alias="desiredStatus")
    cost: float | None = Field(None, validation_alias=AliasChoices("cost", "costPerHr"))
    #: null unless the container runs
    runtime: dict[str, Any] | None = None
    env: dict[str, str] | list[Any] | None = None
    gpu: dict[str, Any] | None = None
    data_center_id: str | None = Field(None, alias="dataCenterId")
    mounts: dict[str, Any] | None = None
    #: an Instant Cluster member's ``PodCluster`` (``id``, ``rank``, ``ip``); None: a lone pod
    cluster: dict[str, Any] | None = None

    @property
    def cluster_rank(self) -> int | None:
        """The pod's node rank in its cluster (None until RunPod assigns it)."""
        rank = (self.cluster or {}).get("rank")
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None

    @property
    def cluster_ip(self) -> str | None:
        """The pod's address on its cluster's private network (None until assigned)."""
        ip = (self.cluster or {}).get("ip")
        return ip if isinstance(ip, str) and ip else None

    @property
    def state_word(self) -> str:
        return (self.status or self.desired_status or "").upper()

    @property
    def cost_per_hr(self) -> float | None:
        return self.cost

    def env_value(self, name: str) -> str | None:
        """One variable of the pod's environment (an object in REST v2, ``KEY=value``
        strings in GraphQL answers)."""
        env = self.env
        if isinstance(env, dict):
            value = env.get(name)
            return value if isinstance(value, str) else None
        for item in env or []:
            if isinstance(item, str) and item.startswith(name + "="):
                return item[len(name) + 1 :]
        return None


class Cluster(BaseModel):
    """A RunPod Instant Cluster (REST v2 ``Cluster``): ``podCount`` identical pods in one data
    center; its member pods come from ``GET /v2/clusters/{id}/pods``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    name: str = ""
    type: str = ""
    compute: dict[str, Any] = Field(default_factory=dict)
    data_center_id: str | None = Field(None, alias="dataCenterId")
    created_at: str = Field("", alias="createdAt")

    @property
    def pod_count(self) -> int:
        count = self.compute.get("podCount")
        return count if isinstance(count, int) else 0


class NetworkVolume(BaseModel):
    """A RunPod network volume (REST v2): it lives in one data center, and pods that mount it
    run there."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    name: str = ""
    size: int = 0
    data_center: str = Field("", alias="dataCenter")
    type: str = ""


def pod_state(
    pod: Pod | None, *, spot: bool, stopped_by_corral: bool = False
) -> tuple[InstanceState, str]:
    """The pod's :class:`InstanceState` and a one-line detail (see the module's table)."""
    if pod is None:
        return InstanceState.TERMINATED, "no such pod"
    word = pod.state_word
    if word == "TERMINATED":
        return InstanceState.TERMINATED, "terminated"
    if word == "RUNNING":
        return InstanceState.RUNNING, "running"
    if word in _PROVISIONING:
        return InstanceState.PROVISIONING, f"pod {word.lower()}"
    if word in _STOPPED:
        if stopped_by_corral:
            return InstanceState.STOPPED, "stopped by corral"
        if spot:
            return InstanceState.PREEMPTED, "spot pod interrupted by RunPod"
        return InstanceState.FAILED, "the pod was stopped by RunPod, not by corral"
    if word in _FAILED:
        return InstanceState.FAILED, f"pod {word.lower()} (the container failed)"
    return InstanceState.UNKNOWN, f"unknown pod status {word or '(none)'!r}"
