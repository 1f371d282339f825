"""The GraphQL documents the RunPod provider sends: spot pods, their resume, spot prices
(REST v2 has no spot option), and on-demand pods that need a least number of vCPUs or amount
of memory on their host (REST v2 cannot ask for either); everything else goes through REST v2.

Inputs are written inline, the way RunPod's own SDK and docs do (the schema's input type
names are not published, so ``$variables`` would have to guess them). :func:`literal` writes
a Python value as a GraphQL literal: strings through JSON escaping (a GraphQL string accepts
the same escapes), so no value can break out of its string; :class:`EnumValue` for bare enum
words such as ``SECURE``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnumValue(str):
    """A GraphQL enum value, written without quotes."""


def literal(value: Any) -> str:
    """``value`` as a GraphQL input literal."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, EnumValue):
        if not _NAME.match(value):
            raise ValueError(f"not a GraphQL enum value: {value!r}")
        return str(value)
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("GraphQL numbers are finite")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str) or not _NAME.match(key):
                raise ValueError(f"not a GraphQL field name: {key!r}")
        return "{" + ", ".join(f"{k}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a GraphQL literal")


_POD_FIELDS = "id name desiredStatus costPerHr machineId"
_PRICE_FIELDS = "minimumBidPrice uninterruptablePrice stockStatus"


def gpu_types(gpu_count: int) -> str:
    """Every GPU type with its prices, and the price and stock for ``gpu_count`` GPUs in the
    secure (``secure``) and community (``community``) clouds."""
    count = int(gpu_count)
    return (
        "query GpuTypes { gpuTypes { id displayName memoryInGb maxGpuCount secureCloud "
        "communityCloud securePrice communityPrice secureSpotPrice communitySpotPrice "
        f"secure: lowestPrice(input: {{gpuCount: {count}, secureCloud: true}}) "
        f"{{ {_PRICE_FIELDS} }} "
        f"community: lowestPrice(input: {{gpuCount: {count}, secureCloud: false}}) "
        f"{{ {_PRICE_FIELDS} }} }} }}"
    )


def rent_interruptable(pod_input: dict[str, Any]) -> str:
    """Create a spot pod (``podRentInterruptable``, spelled as in the API)."""
    return (
        f"mutation RentSpot {{ podRentInterruptable(input: {literal(pod_input)}) "
        f"{{ {_POD_FIELDS} }} }}"
    )


def deploy_on_demand(pod_input: dict[str, Any]) -> str:
    """Create an on-demand pod (``podFindAndDeployOnDemand``): only for a pod that needs a
    host with a least number of vCPUs or amount of memory, which REST v2 cannot ask for."""
    return (
        f"mutation DeployOnDemand {{ podFindAndDeployOnDemand(input: {literal(pod_input)}) "
        f"{{ {_POD_FIELDS} }} }}"
    )


def bid_resume(pod_id: str, bid_per_gpu: float, gpu_count: int) -> str:
    """Start a stopped spot pod again with a bid."""
    args = {"podId": pod_id, "bidPerGpu": float(bid_per_gpu), "gpuCount": int(gpu_count)}
    return f"mutation BidResume {{ podBidResume(input: {literal(args)}) {{ id desiredStatus }} }}"
