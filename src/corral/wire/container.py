"""A job's ``image:`` on a node that is not itself that image (this machine, a pool worker, a
cloud VM): the agent stays on the host and runs each setup command and stage in the image
through a container engine (``docker`` or ``podman``; see ``corral.agent.container`` and
``docs/shipping.md``).

Which engine: ``CORRAL_CONTAINER_ENGINE`` on the node (a command, arguments allowed: ``podman
--runtime runc``), else the plan's (a provider that knows its machine has one: AWS's
Deep Learning AMI has ``docker``), else ``podman`` on PATH, else ``docker`` on PATH. None of
them: a job with ``image:`` is refused (:func:`no_engine_reason`), never run on the host.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

#: the node's choice of engine: a command (``docker``, ``/usr/bin/podman``, ``podman --runtime
#: runc``); it wins over the plan's and over the PATH search
ENV_CONTAINER_ENGINE = "CORRAL_CONTAINER_ENGINE"
#: the private registry's credentials, in the agent's environment only (the provider puts
#: them there from the secret store; never in the plan, a stage's environment or a log)
ENV_IMAGE_REGISTRY = "CORRAL_IMAGE_REGISTRY"
ENV_IMAGE_USERNAME = "CORRAL_IMAGE_USERNAME"
ENV_IMAGE_PASSWORD = "CORRAL_IMAGE_PASSWORD"
IMAGE_AUTH_ENV = (ENV_IMAGE_REGISTRY, ENV_IMAGE_USERNAME, ENV_IMAGE_PASSWORD)
#: "none" on a node whose GPU ids name no device (a machine of the fake cloud): the engine gets
#: no GPU options (CUDA_VISIBLE_DEVICES is still renumbered)
ENV_CONTAINER_GPUS = "CORRAL_CONTAINER_GPUS"
#: engines looked for on PATH, in this order
ENGINES = ("podman", "docker")


class ContainerPlan(BaseModel):
    """The image the agent runs the job's commands in, through an engine on the node."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(min_length=1, description="The spec's `image:`.")
    engine: str | None = Field(
        None,
        description="The engine command the provider knows its node has (`docker`); None: "
        "CORRAL_CONTAINER_ENGINE, else podman, else docker on PATH.",
    )


def find_engine(
    planned: str | None = None, environ: Mapping[str, str] | None = None
) -> list[str] | None:
    """The engine's command line (argv prefix), or None when there is none: the node's
    CORRAL_CONTAINER_ENGINE, else ``planned``, else podman or docker on PATH. A command that
    names a program which is not there counts as none."""
    env = os.environ if environ is None else environ
    path = env.get("PATH")
    for choice in (env.get(ENV_CONTAINER_ENGINE, "").strip(), (planned or "").strip()):
        if choice:
            try:
                argv = shlex.split(choice)
            except ValueError:
                return None
            found = shutil.which(argv[0], path=path) if argv else None
            return [found, *argv[1:]] if found else None
    for name in ENGINES:
        found = shutil.which(name, path=path)
        if found:
            return [found]
    return None


def no_engine_reason(image: str, environ: Mapping[str, str] | None = None) -> str:
    """Why a job with ``image:`` cannot run here, in one line."""
    env = os.environ if environ is None else environ
    chosen = env.get(ENV_CONTAINER_ENGINE, "").strip()
    if chosen:
        return (
            f"image {image!r} needs a container engine: {ENV_CONTAINER_ENGINE}={chosen!r} "
            "is not a command on this machine"
        )
    return (
        f"image {image!r} needs a container engine: neither podman nor docker is on PATH "
        f"(install one, or set {ENV_CONTAINER_ENGINE}); corral does not run the job on the host"
    )


def engine_kind(argv: list[str]) -> str:
    """``docker`` or ``podman`` (how GPUs are passed), from the engine program's name."""
    return "docker" if "docker" in os.path.basename(argv[0]) else "podman"
