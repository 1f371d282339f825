"""Settings of the SaladCloud provider: the API, the organization and project, the container,
the priorities offered, the request budget and the caches.

Every field can come from the environment (``CORRAL_SALAD_<FIELD>``, upper case; lists comma
separated), so the controller builds the provider with no arguments; tests pass a
:class:`SaladSettings` that points ``api_url`` at a fake server on loopback. The API key is
not a setting: it is a secret (``SALAD_API_KEY``, from the environment or corral's secret
store), as is a registry password (``SALAD_REGISTRY_PASSWORD``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.errors import BadInput
from corral.providers.common.env_settings import read_settings

ENV_API_KEY = "SALAD_API_KEY"
ENV_REGISTRY_PASSWORD = "SALAD_REGISTRY_PASSWORD"
ENV_PREFIX = "CORRAL_SALAD_"
#: SaladCloud's per-key limit (requests per minute)
API_LIMIT_PER_MIN = 240

Priority = Literal["high", "medium", "low", "batch"]
PRIORITIES: tuple[Priority, ...] = ("high", "medium", "low", "batch")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$")
_COUNTRY = re.compile(r"^[a-z]{2}$")


class SaladSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_url: str = Field("https://api.salad.com/api/public", description="API base URL.")
    organization: str | None = Field(
        None, description="Organization name (created in the portal; the API cannot)."
    )
    project: str | None = Field(None, description="Project name inside the organization.")
    image: str = Field(
        "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        description="Container image; it needs python 3.11+ and corral (or `install_command`).",
    )
    install_command: str | None = Field(
        None,
        description="Shell command the container runs when its python cannot import corral; "
        "None: the image must have corral.",
    )
    registry_username: str | None = Field(
        None,
        description="User of a private registry (basic auth); the password is the secret "
        f"{ENV_REGISTRY_PASSWORD}.",
    )
    priorities: list[Priority] = Field(
        default_factory=lambda: list(PRIORITIES),
        min_length=1,
        description="Priorities offered (high is not preempted by other workloads; the "
        "others are, and are cheaper).",
    )
    country_codes: list[str] = Field(
        default_factory=list, description="Countries nodes may be in (ISO alpha-2); [] = any."
    )
    agent_port: int = Field(8750, ge=1, le=65535, description="The agent's port (the gateway's).")
    gateway_scheme: Literal["https", "http"] = Field(
        "https", description="Scheme of the container gateway's address."
    )
    gateway_url: str | None = Field(
        None,
        description="The agent's address made from the gateway's host name: a URL with "
        "{dns} in it (a proxy in front of the gateway, a test's fake gateway); None: "
        "<gateway_scheme>://{dns}.",
    )
    gateway_auth: bool = Field(
        False,
        description="Require the Salad-Api-Key on the gateway; off by default: the agent "
        "checks its own token, and the probes must answer anyone.",
    )
    restart_policy: Literal["always", "on_failure", "never"] = Field(
        "never", description="What the node does when the container exits."
    )
    cpus: int = Field(4, ge=1, le=1024, description="vCPUs when the job does not say.")
    memory_gb: float = Field(16.0, ge=1, description="Memory (GB) when the job does not say.")
    disk_gb: int = Field(50, ge=1, description="Ephemeral disk (GB) when the job does not say.")
    shm_size_mb: int = Field(2048, ge=64, le=1073741824, description="/dev/shm size in MB.")
    cpu_price_per_vcpu_hour: float = Field(
        0.004, ge=0, description="Estimated USD per vCPU-hour of a CPU-only container."
    )
    memory_price_per_gb_hour: float = Field(
        0.001, ge=0, description="Estimated USD per GB-hour of a CPU-only container."
    )
    controller_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="A container whose job ended exits after this long without a controller call.",
    )
    requests_per_minute: float = Field(
        200.0,
        gt=0,
        le=API_LIMIT_PER_MIN,
        description="Most API requests per minute for one API key, shared by every run of a "
        "controller (SaladCloud allows 240).",
    )
    burst: int = Field(10, ge=1, le=40, description="Requests sent at once before the rate holds.")
    list_cache_s: float = Field(
        10.0, ge=0, description="How long one listing of the container groups serves every run."
    )
    instances_cache_s: float = Field(
        60.0, ge=0, description="How long a group's instance list is reused while it is steady."
    )
    price_cache_s: float = Field(300.0, ge=0, description="How long GPU classes are reused.")
    create_attempts: int = Field(3, ge=1, description="Creates tried for one launch.")
    sweep_min_age_s: float = Field(
        600.0, ge=0, description="Container groups younger than this are never swept as leaks."
    )

    @model_validator(mode="after")
    def _under_the_limit(self) -> SaladSettings:
        if self.requests_per_minute + self.burst > API_LIMIT_PER_MIN:
            raise ValueError(
                f"requests_per_minute + burst must stay at most {API_LIMIT_PER_MIN} "
                "(SaladCloud's limit per API key)"
            )
        return self

    @field_validator("gateway_url")
    @classmethod
    def _gateway_url(cls, value: str | None) -> str | None:
        if value is not None and (
            "{dns}" not in value or not value.startswith(("http://", "https://"))
        ):
            raise ValueError(f"{value!r} is not an http(s) URL with {{dns}} in it")
        return value

    def gateway(self, dns: str) -> str:
        """The agent's address behind the gateway whose host name is ``dns``."""
        if self.gateway_url:
            return self.gateway_url.replace("{dns}", dns)
        return f"{self.gateway_scheme}://{dns}"

    @field_validator("organization", "project")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(f"{value!r} is not a SaladCloud name (a-z, 0-9, '-'; 2-63)")
        return value

    @field_validator("country_codes")
    @classmethod
    def _countries(cls, value: list[str]) -> list[str]:
        codes = [c.strip().lower() for c in value if c.strip()]
        for code in codes:
            if not _COUNTRY.match(code):
                raise ValueError(f"{code!r} is not an ISO 3166 alpha-2 country code")
        return codes

    def where(self) -> tuple[str, str]:
        """(organization, project); :class:`BadInput` naming the variable that is missing."""
        for name in ("organization", "project"):
            if not getattr(self, name):
                raise BadInput(
                    f"salad: no {name}: export {ENV_PREFIX}{name.upper()} "
                    f"(the SaladCloud {name} name from the portal)"
                )
        assert self.organization and self.project
        return self.organization, self.project

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> SaladSettings:
        """Settings from ``CORRAL_SALAD_*`` variables, then ``overrides``. A bad value is a
        one-line :class:`BadInput` naming the variable."""
        return read_settings(
            cls,
            environ,
            ENV_PREFIX,
            overrides,
            what="salad settings",
            nullable=("install_command", "registry_username", "gateway_url"),
            item=str.lower,
        )
