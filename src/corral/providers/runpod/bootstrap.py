"""What a pod is created with: its name, environment and start command, and the create body.

The pod's start command (``bash -c`` with :func:`start_script`) finds python, installs corral
if the image lacks it (only with ``install_command``), and runs
``python -m corral.providers.runpod.boot agent``, which writes the plan from the environment
and starts corral's agent on the agent port (exposed as ``<port>/http``, reached through
RunPod's proxy). The plan (gzip + base64), the agent token and the job's env travel as pod
environment variables: RunPod shows a pod's env to holders of the account's API key, like a
cloud shows user-data, and never to anyone else; corral never logs or returns them.

What a pod needs from the plan is the provider's node contribution (:func:`node_profile`):
the agent listens on all interfaces on the agent port, checkpoints go to the network volume
when one is mounted (so the next attempt, in a new pod, resumes from them), and a pod whose job
ended terminates itself when no controller has called for ``controller_timeout_s``. The plan
travels as the controller built it.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
from typing import Any

from corral.providers.base import Bootstrap, NodeProfile, Offer
from corral.providers.runpod.graphql import EnumValue
from corral.providers.runpod.settings import RunPodSettings
from corral.wire.env import ENV_AGENT_TOKEN
from corral.wire.plan import AgentPlan

NAME_PREFIX = "corral-"
ENV_PLAN = "CORRAL_PLAN_GZ"
ENV_KEY = "CORRAL_RUNPOD_LAUNCH_KEY"
ENV_OFFER = "CORRAL_RUNPOD_OFFER"
#: where the pod's shutdown command sends its DELETE (set only when not the default)
ENV_REST_URL = "CORRAL_RUNPOD_REST_URL"
#: "host:port" the agent binds instead of the plan's (``corral agent --bind``: a fake server
#: running several pods' agents on one host gives each its own port; a real pod never sets it)
ENV_BIND = "CORRAL_AGENT_BIND"


def pod_name(key: str) -> str:
    """The pod's name carries the launch key: how a launch finds its pod again."""
    return NAME_PREFIX + key


def key_of(name: str) -> str | None:
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else None


def node_profile(run_id: str, settings: RunPodSettings) -> NodeProfile:
    """What a pod of ``run_id`` needs from the agent plan (see the module doc)."""
    checkpoint_dir = None
    if settings.network_volume_id:
        mount = settings.volume_mount_path.rstrip("/")
        checkpoint_dir = f"{mount}/corral/{run_id}/checkpoints"
    return NodeProfile(
        host="0.0.0.0",
        port=settings.agent_port,
        checkpoint_dir=checkpoint_dir,
        controller_timeout_s=settings.controller_timeout_s,
    )


def encode_plan(plan: AgentPlan) -> str:
    raw = plan.model_dump_json().encode()
    return base64.b64encode(gzip.compress(raw, mtime=0)).decode("ascii")


def decode_plan(value: str) -> dict[str, Any]:
    return json.loads(gzip.decompress(base64.b64decode(value)))


def pod_env(
    bootstrap: Bootstrap, offer: Offer, key: str, settings: RunPodSettings
) -> dict[str, str]:
    env = dict(bootstrap.env)
    env[ENV_PLAN] = encode_plan(bootstrap.plan)
    env[ENV_AGENT_TOKEN] = bootstrap.token
    env[ENV_KEY] = key
    env[ENV_OFFER] = offer.model_dump_json()
    if settings.rest_url != RunPodSettings.model_fields["rest_url"].default:
        env[ENV_REST_URL] = settings.rest_url
    return env


def start_script(settings: RunPodSettings) -> str:
    install = settings.install_command
    missing = (
        f'echo "corral: installing corral" >&2; {install}'
        if install
        else 'echo "corral: the image has no corral for $PY: use an image with corral or set '
        'CORRAL_RUNPOD_INSTALL_COMMAND" >&2; exit 127'
    )
    return "\n".join(
        [
            "set -e",
            'PY="$(command -v python3 || command -v python || true)"',
            '[ -n "$PY" ] || { echo "corral: the image has no python" >&2; exit 127; }',
            f'"$PY" -c "import corral" 2>/dev/null || {{ {missing}; }}',
            'exec "$PY" -m corral.providers.runpod.boot agent',
        ]
    )


def rest_body(
    offer: Offer, env: dict[str, str], key: str, settings: RunPodSettings
) -> dict[str, Any]:
    """``POST /pods`` for an on-demand pod."""
    d = offer.details
    body: dict[str, Any] = {
        "name": pod_name(key),
        "imageName": settings.image,
        "computeType": "GPU",
        "gpuTypeIds": [d["gpu_type_id"]],
        "gpuCount": offer.gpu_count,
        "cloudType": d["cloud_type"],
        "interruptible": False,
        "containerDiskInGb": int(d.get("disk_gb") or settings.container_disk_gb),
        "volumeInGb": 0,
        "env": env,
        "ports": [f"{settings.agent_port}/http"],
        "dockerStartCmd": ["bash", "-c", start_script(settings)],
    }
    if d.get("min_vcpu_per_gpu"):
        body["minVCPUPerGPU"] = int(d["min_vcpu_per_gpu"])
    if d.get("min_ram_per_gpu"):
        body["minRAMPerGPU"] = int(d["min_ram_per_gpu"])
    if settings.network_volume_id:
        body["networkVolumeId"] = settings.network_volume_id
        body["volumeMountPath"] = settings.volume_mount_path
        if d.get("data_center_id"):
            body["dataCenterIds"] = [d["data_center_id"]]
    return body


def spot_input(
    offer: Offer, env: dict[str, str], key: str, settings: RunPodSettings
) -> dict[str, Any]:
    """``podRentInterruptable`` input for a spot pod, bidding the offer's price per GPU."""
    d = offer.details
    count = max(1, offer.gpu_count)
    data: dict[str, Any] = {
        "bidPerGpu": float(d["bid_per_gpu"]),
        "cloudType": EnumValue(d["cloud_type"]),
        "gpuTypeId": d["gpu_type_id"],
        "gpuCount": count,
        "name": pod_name(key),
        "imageName": settings.image,
        "containerDiskInGb": int(d.get("disk_gb") or settings.container_disk_gb),
        "volumeInGb": 0,
        "ports": f"{settings.agent_port}/http",
        "env": [{"key": k, "value": v} for k, v in env.items()],
        "dockerArgs": "bash -c " + shlex.quote(start_script(settings)),
    }
    if d.get("min_vcpu_per_gpu"):
        data["minVcpuCount"] = int(d["min_vcpu_per_gpu"]) * count
    if d.get("min_ram_per_gpu"):
        data["minMemoryInGb"] = int(d["min_ram_per_gpu"]) * count
    if settings.network_volume_id:
        data["networkVolumeId"] = settings.network_volume_id
        data["volumeMountPath"] = settings.volume_mount_path
        if d.get("data_center_id"):
            data["dataCenterId"] = d["data_center_id"]
    return data
