"""What a deployment is created with: its name, container config (the agent on the single
traffic port), environment and the boot blob.

One attempt is one deployment of one container, named for the launch key
(:func:`deployment_name`) and carrying ``CORRAL_IONET_LAUNCH_KEY`` in its env. IO.net runs
HTTP-server containers only, with one traffic port used for its health checks and the public
URL: the agent's API is that server, so a batch training job needs nothing more. The
container runs the node bootstrap (``providers/common/node_bootstrap.sh``: this corral's
version from the controller's wheel or an index when the image lacks it), which then runs
``python -m corral.providers.ionet.boot agent``. The job's code is shipped to
``/corral/runs/<run>/work`` (through the run's storage, or the agent's traffic port).

The boot blob (the plan, the agent token and the job's env, secrets included; the one
delivery format of container clouds, :mod:`corral.agent.boot`) and the
bootstrap's install values (a presigned wheel URL is a credential) go in
``secret_env_variables``: IO.net returns only the keys of those, never their values.
"""

from __future__ import annotations

from typing import Any

from corral.providers.base import Bootstrap, NodeProfile, Offer
from corral.providers.common import wheel
from corral.providers.common.boot_blob import boot_env, label_name
from corral.providers.ionet.settings import IonetSettings

NAME_PREFIX = "corral-"
ENV_KEY = "CORRAL_IONET_LAUNCH_KEY"
ENV_OFFER = "CORRAL_IONET_OFFER"
#: "host:port" the agent binds instead of ``[::]:<traffic_port>`` (a fake cloud's containers
#: share one host; a real container never sets it)
ENV_BIND = "CORRAL_AGENT_BIND"
#: where a container keeps the runs' code
RUNS = "/corral/runs"
#: what the container runs once corral is there
BOOT_ARGS = ("-m", "corral.providers.ionet.boot", "agent")


def deployment_name(key: str) -> str:
    return label_name(NAME_PREFIX, key)


def node_profile(
    run_id: str, settings: IonetSettings, interruptions_per_hour: float | None = None
) -> NodeProfile:
    """The agent listens on every interface on the traffic port; the code is shipped to
    ``/corral/runs/<run>/work``; the image may lack corral (the bootstrap installs it);
    checkpoints stay on the container's disk (a replaced container starts empty: resume from
    checkpoints.storage)."""
    return NodeProfile(
        host="::",
        port=settings.traffic_port,
        controller_timeout_s=settings.controller_timeout_s,
        interruptions_per_hour=interruptions_per_hour,
        workdir=f"{RUNS}/{run_id}/work",
        install_corral=True,
    )


def start_script(settings: IonetSettings) -> str:
    """The node bootstrap (see :mod:`corral.providers.common.wheel`), preceded by
    ``install_command`` when set (an advanced override, run only when the image's python
    lacks corral)."""
    return wheel.start_script(settings.install_command)


def deploy_body(
    offer: Offer,
    bootstrap: Bootstrap,
    key: str,
    settings: IonetSettings,
    registry_secret: str | None = None,
) -> dict[str, Any]:
    """``POST /deploy`` for one attempt. The image: the spec's (with its registry
    credentials), else the settings' (with ``registry_secret``)."""
    d = offer.details
    image = bootstrap.image
    if image is not None:
        registry = {
            "image_url": image.name,
            "registry_username": image.username,
            "registry_secret": image.password if image.username else None,
        }
    else:
        registry = {
            "image_url": settings.image,
            "registry_username": settings.registry_username,
            "registry_secret": registry_secret if settings.registry_username else None,
        }
    return {
        "resource_private_name": deployment_name(key),
        "duration_hours": settings.duration_hours,
        "gpus_per_container": max(1, offer.gpu_count),
        "hardware_id": int(d["hardware_id"]),
        "location_ids": [int(d["location_id"])],
        "container_config": {
            "replica_count": 1,
            "traffic_port": settings.traffic_port,
            "env_variables": {
                ENV_KEY: key,
                ENV_OFFER: offer.model_dump_json(exclude_defaults=True),
            },
            "secret_env_variables": {**bootstrap.install, **boot_env(bootstrap)},
            "entrypoint": ["bash", "-c"],
            "args": [start_script(settings), "corral-boot", *BOOT_ARGS],
        },
        "registry_config": registry,
    }
