"""Settings of the RunPod provider: API endpoints, the pod image, the network volume, limits.

Every field can come from the environment (``CORRAL_RUNPOD_<FIELD>``, upper case), so the
controller builds the provider with no arguments; tests pass a :class:`RunPodSettings` that
points the URLs at a fake server on loopback. The API key is not a setting: it is a secret
(``CORRAL_RUNPOD_API_KEY`` or RunPod's own ``RUNPOD_API_KEY``, the first set one winning, each
from corral's secret store, then the environment: :data:`API_KEY_NAMES`) and never stored
here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corral.providers.common.env_settings import read_settings

ENV_API_KEY = "RUNPOD_API_KEY"
#: the names the API key is read under, the first set one winning (each from corral's secret
#: store, then the environment): corral's own, then RunPod's (its guides and runpodctl export
#: RUNPOD_API_KEY; in a pod it holds the pod-scoped key, so corral's own name comes first)
API_KEY_NAMES = ("CORRAL_RUNPOD_API_KEY", ENV_API_KEY)
ENV_PREFIX = "CORRAL_RUNPOD_"

CloudType = Literal["SECURE", "COMMUNITY"]


class RunPodSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rest_url: str = Field(
        "https://api.runpod.io/v2",
        description="REST v2 base URL (pods, network volumes, the GPU catalog).",
    )
    graphql_url: str = Field("https://api.runpod.io/graphql", description="GraphQL endpoint.")
    proxy_url: str = Field(
        "https://{pod_id}-{port}.proxy.runpod.net",
        description="Template of the URL of a pod's HTTP port ({pod_id}, {port}).",
    )
    image: str = Field(
        "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
        description="Container image of the pods; it needs python 3.11+ (corral is installed "
        "with `install_command` when the image lacks it).",
    )
    install_command: str | None = Field(
        None,
        description="Shell command the pod runs when its python cannot import corral (e.g. "
        '"pip install corral==0.1.0" from your index); None: the image must have corral.',
    )
    cloud_types: list[CloudType] = Field(
        default_factory=lambda: list[CloudType](("SECURE", "COMMUNITY")),
        min_length=1,
        description="Which RunPod clouds to offer: SECURE (data centers), COMMUNITY (hosts).",
    )
    agent_port: int = Field(8750, ge=1, le=65535, description="The agent's port in the pod.")
    container_disk_gb: int = Field(50, ge=10, description="Least container disk per pod, GB.")
    network_volume_id: str | None = Field(
        None,
        description="Network volume mounted in every pod for checkpoints; pods then run in "
        "the volume's data center only.",
    )
    volume_mount_path: str = Field("/workspace", description="Where the network volume is.")
    controller_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="A pod whose job ended terminates itself after this many seconds without "
        "a call from a controller (when the plan does not set its own).",
    )
    price_cache_s: float = Field(60.0, ge=0, description="How long GPU prices are reused.")
    rate_per_s: float | None = Field(
        5.0, gt=0, description="Most API requests per second (None: no limit)."
    )
    log_read_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="How long `corral logs` reads a pod's log stream, in seconds (the stream "
        "follows the container and may never end).",
    )
    create_attempts: int = Field(
        3, ge=1, description="Creates tried for one launch when the answer is ambiguous."
    )
    gang_port: int = Field(
        29500,
        ge=1024,
        le=65535 - 256,
        description="A multi-node job's first rendezvous port on the head pod of its Instant "
        "Cluster (stage i meets on this + i; RunPod opens every port between a cluster's pods).",
    )
    place_timeout_s: float = Field(
        600.0,
        gt=0,
        description="An Instant Cluster whose pod a node needs has no rank or address this "
        "long after its create: the cluster is deleted and the launch has no capacity.",
    )

    @field_validator("rest_url")
    @classmethod
    def _v2(cls, value: str) -> str:
        if value.rstrip("/").endswith("/v1"):
            raise ValueError(
                "RunPod retired REST v1 on 2026-11-15: use the v2 base URL "
                "(https://api.runpod.io/v2)"
            )
        return value

    @field_validator("proxy_url")
    @classmethod
    def _template(cls, value: str) -> str:
        if "{pod_id}" not in value or "{port}" not in value:
            raise ValueError("the proxy URL template needs {pod_id} and {port}")
        return value

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> RunPodSettings:
        """Settings from ``CORRAL_RUNPOD_*`` variables (lists comma separated), then
        ``overrides``. A bad value is a one-line :class:`BadInput` naming the variable."""
        return read_settings(
            cls,
            environ,
            ENV_PREFIX,
            overrides,
            what="runpod settings",
            nullable=("rate_per_s", "install_command"),
            item=str.upper,
        )
