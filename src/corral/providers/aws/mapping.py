"""EC2 instance states -> :class:`InstanceState` (pure functions over boto3 dicts).

=================  ===========================================================================
EC2 state          InstanceState
=================  ===========================================================================
pending            PROVISIONING
running            RUNNING (the agent's endpoint once the instance has an address)
shutting-down,     PREEMPTED if EC2 reclaimed a spot instance (``StateReason``
terminated         ``Server.SpotInstanceTermination``, or its spot request says so); FAILED if
                   the launch itself failed (``Server.InsufficientInstanceCapacity``,
                   ``Server.InternalError``, ``Client.VolumeLimitExceeded``,
                   ``Client.InvalidSnapshot.NotFound``); else TERMINATED (we terminated it, or
                   the machine powered itself off: ``Client.InstanceInitiatedShutdown``)
stopping, stopped  PREEMPTED if EC2 stopped a spot instance (``Server.SpotInstanceShutdown``),
                   else STOPPED
(any state)        PREEMPTED while the spot request reports an interruption
                   (``marked-for-termination``, ``instance-terminated-no-capacity``, ...):
                   EC2 sets it at the two-minute notice, while the instance still runs
(missing)          TERMINATED
anything else      UNKNOWN
=================  ===========================================================================
"""

from __future__ import annotations

from typing import Any

from corral.providers.base import InstanceState

SPOT_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
FAILED_REASONS = frozenset(
    {
        "Server.InsufficientInstanceCapacity",
        "Server.InternalError",
        "Client.VolumeLimitExceeded",
        "Client.InvalidSnapshot.NotFound",
    }
)
#: spot request status codes meaning "EC2 is taking (or took) the instance back"
SPOT_REQUEST_INTERRUPTED = frozenset(
    {
        "marked-for-termination",
        "marked-for-stop",
        "instance-terminated-by-price",
        "instance-terminated-no-capacity",
        "instance-terminated-capacity-oversubscribed",
        "instance-terminated-launch-group-constraint",
        "instance-stopped-by-price",
        "instance-stopped-no-capacity",
        "instance-stopped-capacity-oversubscribed",
        "instance-terminated-by-service",
    }
)
_REASON_TEXT = {
    "Client.UserInitiatedShutdown": "terminated through the API",
    "Client.InstanceInitiatedShutdown": "the machine powered itself off",
    "Server.SpotInstanceTermination": "EC2 reclaimed the spot instance",
    "Server.SpotInstanceShutdown": "EC2 stopped the spot instance",
}


def tags(inst: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in inst.get("Tags") or []}


def state_name(inst: dict[str, Any]) -> str:
    return str((inst.get("State") or {}).get("Name", ""))


def is_spot(inst: dict[str, Any]) -> bool:
    return inst.get("InstanceLifecycle") == "spot"


def _reason(inst: dict[str, Any]) -> tuple[str, str]:
    sr = inst.get("StateReason") or {}
    return str(sr.get("Code") or ""), str(sr.get("Message") or "")


def map_state(
    inst: dict[str, Any], spot_request_code: str | None = None
) -> tuple[InstanceState, str]:
    """(state, detail) of a ``describe_instances`` item; ``spot_request_code`` is the status
    code of its spot request, when it has one."""
    name = state_name(inst)
    code, message = _reason(inst)
    interrupted = spot_request_code in SPOT_REQUEST_INTERRUPTED
    why = _REASON_TEXT.get(code) or message or code
    if interrupted and name in (
        "pending",
        "running",
        "shutting-down",
        "terminated",
        "stopping",
        "stopped",
    ):
        note = f"spot interruption ({spot_request_code})"
        return InstanceState.PREEMPTED, f"{note}; instance {name}"
    if name == "pending":
        return InstanceState.PROVISIONING, "instance pending"
    if name == "running":
        return InstanceState.RUNNING, ""
    if name in ("shutting-down", "terminated"):
        if code in SPOT_REASONS:
            return InstanceState.PREEMPTED, f"{why} (instance {name})"
        if code in FAILED_REASONS:
            return InstanceState.FAILED, f"instance {name}: {message or code}"
        return InstanceState.TERMINATED, f"instance {name}" + (f": {why}" if why else "")
    if name in ("stopping", "stopped"):
        if code in SPOT_REASONS:
            return InstanceState.PREEMPTED, f"{why} (instance {name})"
        return InstanceState.STOPPED, f"instance {name}" + (f": {why}" if why else "")
    return InstanceState.UNKNOWN, f"unknown EC2 state {name!r}"
