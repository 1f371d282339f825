"""What a pod is created with: its name, environment and start command, and the create body.

The pod's start command (``bash -c`` with :func:`start_script`, sent in RunPod's documented
JSON form ``{"entrypoint": ["bash", "-c"], "cmd": [SCRIPT, ...]}``: :func:`start_args`) is
the node bootstrap: it finds
python, installs this corral's version if the image lacks it (the controller's wheel, fetched
from the run's storage, or the same version from an index), and runs
``python -m corral.providers.runpod.boot agent``, which writes the plan from the environment
and starts corral's agent on the agent port (exposed as ``<port>/http``, reached through
RunPod's proxy). The plan, the agent token and the job's env travel as pod environment
variables, in the one delivery format of container clouds (:mod:`corral.agent.boot`): RunPod shows a pod's env to holders of the account's API key, like a
cloud shows user-data, and never to anyone else; corral never logs or returns them.

What a pod needs from the plan is the provider's node contribution (:func:`node_profile`):
the agent listens on all interfaces on the agent port, checkpoints go to the network volume
when one is mounted (so the next attempt, in a new pod, resumes from them), and a pod whose job
ended terminates itself when no controller has called for ``controller_timeout_s``. The plan
travels as the controller built it.
"""

from __future__ import annotations

import json
from typing import Any

from corral.providers.base import Bootstrap, NodeProfile, Offer
from corral.providers.common import wheel
from corral.providers.common.boot_blob import boot_env
from corral.providers.runpod.graphql import EnumValue
from corral.providers.runpod.settings import RunPodSettings
from corral.wire.env import ENV_AGENT_BIND
from corral.wire.env import ENV_NODE_ROOT as WIRE_NODE_ROOT
from corral.wire.gang import ENV_GANG_MASTER_ADDR, ENV_GANG_MASTER_PORT, ENV_GANG_RANK, GANG_VARS

NAME_PREFIX = "corral-"
ENV_KEY = "CORRAL_RUNPOD_LAUNCH_KEY"
ENV_OFFER = "CORRAL_RUNPOD_OFFER"
#: where the pod's shutdown command sends its DELETE (set only when not the default)
ENV_REST_URL = "CORRAL_RUNPOD_REST_URL"
#: "host:port" the agent binds instead of the plan's (``corral agent --bind``: a fake server
#: running several pods' agents on one host gives each its own port; a real pod never sets it)
ENV_BIND = ENV_AGENT_BIND
#: a directory standing for the container's "/" (``corral agent --root``: a fake server runs
#: every pod's "container" on one host, each in a root of its own; a real pod never sets it)
ENV_NODE_ROOT = WIRE_NODE_ROOT
#: where a pod keeps the runs' code and state
POD_RUNS = "/corral/runs"


def pod_name(key: str) -> str:
    """The pod's name carries the launch key: how a launch finds its pod again."""
    return NAME_PREFIX + key


def key_of(name: str) -> str | None:
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else None


def node_profile(run_id: str, settings: RunPodSettings) -> NodeProfile:
    """What a pod of ``run_id`` needs from the agent plan (see the module doc): the job's code
    is shipped to ``/corral/runs/<run id>/work`` in the container."""
    checkpoint_dir = None
    if settings.network_volume_id:
        mount = settings.volume_mount_path.rstrip("/")
        checkpoint_dir = f"{mount}/corral/{run_id}/checkpoints"
    return NodeProfile(
        host="0.0.0.0",
        port=settings.agent_port,
        checkpoint_dir=checkpoint_dir,
        controller_timeout_s=settings.controller_timeout_s,
        workdir=f"{POD_RUNS}/{run_id}/work",
        install_corral=True,
    )


def pod_env(
    bootstrap: Bootstrap, offer: Offer, key: str, settings: RunPodSettings
) -> dict[str, str]:
    env = {**bootstrap.install, **boot_env(bootstrap)}
    env[ENV_KEY] = key
    env[ENV_OFFER] = offer.model_dump_json()
    if settings.rest_url != RunPodSettings.model_fields["rest_url"].default:
        env[ENV_REST_URL] = settings.rest_url
    return env


#: what the pod's start command runs once corral is there
BOOT_ARGS = ("-m", "corral.providers.runpod.boot", "agent")


def start_script(settings: RunPodSettings) -> str:
    """The pod's start command (``bash -c SCRIPT corral-boot ARGS...``): the node bootstrap
    (this corral's version from the controller's wheel or an index, see
    :mod:`corral.providers.common.wheel`), preceded by ``install_command`` when set (an
    advanced override, run only when the image's python lacks corral)."""
    return wheel.start_script(settings.install_command)


def start_command(settings: RunPodSettings) -> list[str]:
    """The pod's process: ``bash -c SCRIPT corral-boot ARGS...``."""
    return ["bash", "-c", start_script(settings), "corral-boot", *BOOT_ARGS]


def start_args(settings: RunPodSettings) -> str:
    """The start command as RunPod documents it for a pod's "container start command" (REST
    v2's ``args``, GraphQL's ``dockerArgs``): ``{"entrypoint": [...], "cmd": [...]}``, JSON
    (docs ``pods/templates/manage-templates``; dstack sends the same form). The entrypoint
    replaces the image's ENTRYPOINT, whatever the image has there, and every argument travels
    as one JSON string: nothing of the script is split by RunPod's undocumented rules for a
    plain command string."""
    argv = start_command(settings)
    return json.dumps({"entrypoint": argv[:2], "cmd": argv[2:]})


def _network_mount(
    settings: RunPodSettings, mount: tuple[str, str] | None
) -> tuple[str, str] | None:
    """(volume id, path) of the network volume a pod mounts: the job's named volume, else the
    settings' checkpoint volume, else none."""
    if mount is not None:
        return mount
    if settings.network_volume_id:
        return settings.network_volume_id, settings.volume_mount_path
    return None


def rest_body(
    offer: Offer,
    env: dict[str, str],
    key: str,
    settings: RunPodSettings,
    *,
    mount: tuple[str, str] | None = None,
    image: str | None = None,
    registry_auth_id: str | None = None,
) -> dict[str, Any]:
    """``POST /v2/pods`` for an on-demand pod (v2 places exactly the one GPU type asked, in
    the offer's data center when it names one); ``mount``: the job's network volume;
    ``image``: the spec's, else the settings'; ``registry_auth_id``: RunPod's copy of its
    registry credentials (v2's ``registry``: the contract shows it as a nullable field without
    its shape, UNCONFIRMED; sent as the credentials' id)."""
    d = offer.details
    body: dict[str, Any] = {
        "name": pod_name(key),
        "image": image or settings.image,
        "args": start_args(settings),
        "disk": int(d.get("disk_gb") or settings.container_disk_gb),
        "ports": [f"{settings.agent_port}/http"],
        "env": env,
        "cloud": d["cloud_type"],
        "gpu": {"id": d["gpu_type_id"], "count": max(1, offer.gpu_count)},
    }
    if registry_auth_id:
        body["registry"] = registry_auth_id
    if d.get("data_center_id"):
        body["dataCenterIds"] = [d["data_center_id"]]
    network = _network_mount(settings, mount)
    if network is not None:
        body["mounts"] = {"network": [{"volumeId": network[0], "path": network[1]}]}
    return body


def keeps_host_minimums(offer: Offer) -> bool:
    """Whether the offer asks for a host with at least so many vCPUs or so much memory: REST
    v2's ``CreatePodRequest`` has no field for either on a GPU pod, GraphQL's pod inputs have
    (``minVcpuCount``, ``minMemoryInGb``), so such an on-demand pod is created through
    GraphQL (``podFindAndDeployOnDemand``)."""
    d = offer.details
    return bool(d.get("min_vcpu_per_gpu") or d.get("min_ram_per_gpu"))


def spot_input(
    offer: Offer,
    env: dict[str, str],
    key: str,
    settings: RunPodSettings,
    *,
    mount: tuple[str, str] | None = None,
    image: str | None = None,
    registry_auth_id: str | None = None,
) -> dict[str, Any]:
    """``podRentInterruptable`` input for a spot pod, bidding the offer's price per GPU (for
    an on-demand offer: ``podFindAndDeployOnDemand``'s, the same without a bid)."""
    d = offer.details
    count = max(1, offer.gpu_count)
    data: dict[str, Any] = {
        **({"bidPerGpu": float(d["bid_per_gpu"])} if offer.spot else {}),
        "cloudType": EnumValue(d["cloud_type"]),
        "gpuTypeId": d["gpu_type_id"],
        "gpuCount": count,
        "name": pod_name(key),
        "imageName": image or settings.image,
        "containerDiskInGb": int(d.get("disk_gb") or settings.container_disk_gb),
        "volumeInGb": 0,
        "ports": f"{settings.agent_port}/http",
        "env": [{"key": k, "value": v} for k, v in env.items()],
        "dockerArgs": start_args(settings),
    }
    if registry_auth_id:
        data["containerRegistryAuthId"] = registry_auth_id
    if d.get("min_vcpu_per_gpu"):
        data["minVcpuCount"] = int(d["min_vcpu_per_gpu"]) * count
    if d.get("min_ram_per_gpu"):
        data["minMemoryInGb"] = int(d["min_ram_per_gpu"]) * count
    network = _network_mount(settings, mount)
    if network is not None:
        data["networkVolumeId"], data["volumeMountPath"] = network
    if d.get("data_center_id"):
        data["dataCenterId"] = d["data_center_id"]
    return data


# --- Instant Clusters (a multi-node job: one cluster per gang attempt) -------------------------

#: what RunPod sets on every pod of an Instant Cluster (docs ``instant-clusters/configuration``,
#: "Environment variables"): the pod's node rank (0: the primary) and the primary's address
CLUSTER_RANK = "NODE_RANK"
CLUSTER_PRIMARY = "PRIMARY_ADDR"
#: an Instant Cluster's type for a gang: RunPod's generic distributed-training cluster
CLUSTER_TYPE = "TRAINING"


def cluster_script(settings: RunPodSettings) -> str:
    """A cluster pod's start command: its place in the gang from what RunPod sets on every
    cluster pod (``NODE_RANK``, ``PRIMARY_ADDR``) as the agent's ``CORRAL_GANG_*``, then the
    node bootstrap. One template serves every pod: nothing of a node's rank can be in it."""
    return (
        f'if [ -z "${{{CLUSTER_RANK}:-}}" ] || [ -z "${{{CLUSTER_PRIMARY}:-}}" ]; then\n'
        f'  echo "corral: this pod has no {CLUSTER_RANK} or {CLUSTER_PRIMARY}: RunPod sets them '
        'on every pod of an Instant Cluster" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'export {ENV_GANG_RANK}="${CLUSTER_RANK}" {ENV_GANG_MASTER_ADDR}="${CLUSTER_PRIMARY}"\n'
        + start_script(settings)
    )


def cluster_env(
    bootstrap: Bootstrap, offer: Offer, head_key: str, settings: RunPodSettings
) -> dict[str, str]:
    """Every cluster pod's environment: the head's bootstrap without its rank and address
    (each pod takes its own from RunPod: :func:`cluster_script`), and the gang's port, the
    same for every pod."""
    assert bootstrap.gang is not None
    env = {k: v for k, v in bootstrap.env.items() if k not in GANG_VARS}
    shared = bootstrap.model_copy(update={"env": env, "gang": None})
    out = pod_env(shared, offer, head_key, settings)
    out[ENV_GANG_MASTER_PORT] = str(bootstrap.gang.master_port)
    return out


def cluster_body(
    offer: Offer,
    env: dict[str, str],
    head_key: str,
    nodes: int,
    settings: RunPodSettings,
    *,
    mount: tuple[str, str] | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """``POST /v2/clusters`` for a gang of ``nodes`` pods of the offer's GPUs (the document's
    ``CreateClusterRequest``: no cloud, no registry, no spot option), named for the head's
    key."""
    d = offer.details
    argv = ["bash", "-c", cluster_script(settings), "corral-boot", *BOOT_ARGS]
    body: dict[str, Any] = {
        "name": pod_name(head_key),
        "type": CLUSTER_TYPE,
        "compute": {
            "gpuTypeId": d["gpu_type_id"],
            "gpuCountPerPod": max(1, offer.gpu_count),
            "podCount": nodes,
        },
        "image": image or settings.image,
        "args": json.dumps({"entrypoint": argv[:2], "cmd": argv[2:]}),
        "disk": int(d.get("disk_gb") or settings.container_disk_gb),
        "ports": [f"{settings.agent_port}/http"],
        "env": env,
    }
    if d.get("data_center_id"):
        body["dataCenterIds"] = [d["data_center_id"]]
    network = _network_mount(settings, mount)
    if network is not None:
        body["mounts"] = {"network": [{"volumeId": network[0], "path": network[1]}]}
    return body
