"""Settings of the IO.net provider: the CaaS API, the container, the prepaid duration, locations,
caches.

Every field can come from the environment (``CORRAL_IONET_<FIELD>``, upper case; lists comma
separated). The API key is a secret: ``IONET_API_KEY``, else ``IOCLOUD_API_KEY`` (the name
IO.net's own guide uses), each from corral's secret store or the environment; when both are
set ``IONET_API_KEY`` wins. A private registry's secret is ``IONET_REGISTRY_SECRET``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.common.env_settings import read_settings

ENV_API_KEY = "IONET_API_KEY"
#: the key's name in IO.net's own guide, read when ``IONET_API_KEY`` is not set
ENV_API_KEY_GUIDE = "IOCLOUD_API_KEY"
#: where the API key is looked for, in order
API_KEY_NAMES = (ENV_API_KEY, ENV_API_KEY_GUIDE)
ENV_REGISTRY_SECRET = "IONET_REGISTRY_SECRET"
ENV_PREFIX = "CORRAL_IONET_"


class IonetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(
        "https://api.io.solutions/enterprise/v1/io-cloud/caas",
        description="Enterprise CaaS base URL (x-api-key auth).",
    )
    image: str = Field(
        "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        description="Container image; it needs python 3.11+ and corral (or `install_command`).",
    )
    install_command: str | None = Field(
        None, description="Shell command run when the image's python cannot import corral."
    )
    registry_username: str | None = Field(
        None, description=f"Private registry user; its secret is {ENV_REGISTRY_SECRET}."
    )
    traffic_port: int = Field(
        8750, ge=1, le=65535, description="The deployment's one HTTP port: the agent's."
    )
    duration_hours: int = Field(
        4, ge=1, description="Hours bought at deploy (IO.net deployments are prepaid)."
    )
    extend_hours: int = Field(4, ge=1, description="Hours added when the remainder runs low.")
    extend_below_minutes: float = Field(
        45.0, ge=0, description="Extend a running deployment with fewer minutes left than this."
    )
    location_ids: list[int] = Field(
        default_factory=list, description="Locations (ids) to deploy in; [] = any with capacity."
    )
    max_locations: int = Field(
        3, ge=1, description="Locations priced per hardware type in one offers call."
    )
    controller_timeout_s: float = Field(
        1800.0, gt=0, description="A container whose job ended exits after this long alone."
    )
    rate_per_s: float | None = Field(
        2.0, gt=0, description="Most API requests per second for one key (None: no limit)."
    )
    list_cache_s: float = Field(
        10.0, ge=0, description="How long one listing of the deployments serves every run."
    )
    containers_cache_s: float = Field(
        30.0, ge=0, description="How long a running deployment's container list is reused."
    )
    price_cache_s: float = Field(300.0, ge=0, description="How long hardware prices are reused.")
    create_attempts: int = Field(3, ge=1, description="Deploys tried for one launch.")
    sweep_min_age_s: float = Field(
        600.0, ge=0, description="Deployments younger than this are never swept as leaks."
    )
    log_read_s: float = Field(
        5.0, gt=0, description="How long `corral logs` reads a container's log stream."
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> IonetSettings:
        """Settings from ``CORRAL_IONET_*`` variables, then ``overrides``. A bad value is a
        one-line :class:`BadInput` naming the variable."""
        return read_settings(
            cls,
            environ,
            ENV_PREFIX,
            overrides,
            what="ionet settings",
            nullable=("install_command", "registry_username", "rate_per_s"),
        )
