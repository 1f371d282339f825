"""RunPod pods as the API returns them, and how each pod state maps onto InstanceState.

:class:`Pod` reads the REST v1 pod object (and the GraphQL and REST v2 shapes where they
differ). It ignores fields it does not know: RunPod adds fields to its answers, and an
answer must not break the provider (our own models, the settings, forbid unknown keys).

State mapping (:func:`pod_state`)::

    desiredStatus / status             interruptible  stopped by corral  ->  InstanceState
    RUNNING, container up              any            -                      RUNNING
    RUNNING, not up yet; CREATED,
      PROVISIONING, STARTING,
      RESTARTING                       any            -                      PROVISIONING
    EXITED, PAUSED                     any            yes                    STOPPED
    EXITED, PAUSED                     yes (spot)     no                     PREEMPTED
    EXITED, PAUSED                     no             no                     FAILED
    DEAD, ERROR                        any            -                      FAILED
    TERMINATED, or no such pod         any            -                      TERMINATED
    anything else                      any            -                      UNKNOWN

A spot pod that leaves RUNNING without corral asking was interrupted: RunPod keeps it (its
disk survives, ``podBidResume`` could restart it) with ``desiredStatus: EXITED``. An
on-demand pod stopped by RunPod itself (say the balance reached $0) runs nothing more for
this attempt, so it is FAILED; the controller recovers the run and terminates the pod.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.base import InstanceState

_PROVISIONING = {"CREATED", "PROVISIONING", "STARTING", "RESTARTING"}
_STOPPED = {"EXITED", "PAUSED"}
_FAILED = {"DEAD", "ERROR"}


class Pod(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    name: str = ""
    desired_status: str = Field("", alias="desiredStatus")
    #: REST v2's status (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED)
    status: str = ""
    interruptible: bool = False
    cost_per_hr: float | None = Field(None, alias="costPerHr")
    public_ip: str | None = Field(None, alias="publicIp")
    port_mappings: dict[str, Any] | None = Field(None, alias="portMappings")
    #: GraphQL only: null until the container is up
    runtime: dict[str, Any] | None = None
    last_status_change: str = Field("", alias="lastStatusChange")
    env: dict[str, str] | list[Any] | None = None
    gpu: dict[str, Any] | None = None
    gpu_count: int | None = Field(None, alias="gpuCount")
    machine_id: str | None = Field(None, alias="machineId")

    @property
    def state_word(self) -> str:
        return (self.desired_status or self.status or "").upper()

    @property
    def up(self) -> bool:
        """The container runs: RunPod gave it an address, or GraphQL reports a runtime."""
        return bool(self.public_ip or self.port_mappings or self.runtime)

    def env_value(self, name: str) -> str | None:
        """One variable of the pod's environment (a dict in REST, ``KEY=value`` strings in
        GraphQL answers, ``{key, value}`` objects in GraphQL inputs)."""
        env = self.env
        if isinstance(env, dict):
            value = env.get(name)
            return value if isinstance(value, str) else None
        for item in env or []:
            if isinstance(item, str) and item.startswith(name + "="):
                return item[len(name) + 1 :]
            if isinstance(item, dict) and item.get("key") == name:
                value = item.get("value")
                return value if isinstance(value, str) else None
        return None


def pod_state(pod: Pod | None, *, stopped_by_corral: bool = False) -> tuple[InstanceState, str]:
    """The pod's :class:`InstanceState` and a one-line detail (see the module's table)."""
    if pod is None:
        return InstanceState.TERMINATED, "no such pod"
    word = pod.state_word
    note = f" ({pod.last_status_change})" if pod.last_status_change else ""
    if word == "TERMINATED":
        return InstanceState.TERMINATED, "terminated"
    if word == "RUNNING":
        if pod.up:
            return InstanceState.RUNNING, "running"
        return InstanceState.PROVISIONING, "the container is starting"
    if word in _PROVISIONING:
        return InstanceState.PROVISIONING, f"pod {word.lower()}"
    if word in _STOPPED:
        if stopped_by_corral:
            return InstanceState.STOPPED, "stopped by corral" + note
        if pod.interruptible:
            return InstanceState.PREEMPTED, "spot pod interrupted by RunPod" + note
        return InstanceState.FAILED, "the pod was stopped by RunPod, not by corral" + note
    if word in _FAILED:
        return InstanceState.FAILED, f"pod {word.lower()}" + note
    return InstanceState.UNKNOWN, f"unknown pod status {word or '(none)'!r}"
