"""What the node must put in place before the setup runs: the job's code and data.

Part of the agent plan (``AgentPlan.code``); None means the node sees the controller's files
(the local provider) and the job runs in the spec's workdir as it is.

* ``bundle``: a content-addressed archive (:mod:`corral.bundle`) holding the workdir and the
  ``files:``. With ``storage`` the agent fetches it from object storage itself (the controller
  put it there once; every later attempt fetches the same object, nothing is sent again);
  without, or when the object is missing, the agent waits for the controller to upload it
  through its API (``PUT /code``, resumable). Either way the sha256 is checked on arrival.
* ``git``: the repository the node clones at the commit the controller resolved (a token, if
  any, reaches the node in the bootstrap env under ``token_env``, never in the plan); a
  ``git.diff`` in the bundle (local changes) is applied on top.
* ``files``: bundle members put at node paths; ``mounts``: object-storage prefixes copied to
  node paths before the stages (cached on the node's disk), optionally uploaded back.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BundleRef(_Model):
    sha256: str = Field(description="sha256 of the archive (its name).")
    size: int = Field(ge=0, description="Size of the archive in bytes.")
    storage: str | None = Field(
        None,
        description="URI of the archive in object storage (s3://..., file://...); None: the "
        "controller uploads it through the agent's API.",
    )
    workdir: bool = Field(True, description="The archive holds the workdir (under work/).")
    inline: str | None = Field(
        None,
        description="The archive itself, base64: a small bundle the provider's bootstrap "
        "carries in the plan (no fetch, no upload; its sha256 is checked all the same).",
    )

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError("sha256 must be 64 lower-case hex digits")
        return value


class GitSource(_Model):
    url: str = Field(description="Repository URL the node clones.")
    ref: str = Field("", description="The branch, tag or commit the spec named.")
    commit: str = Field(description="The commit the controller resolved the ref to.")
    token_env: str | None = Field(
        None, description="Environment variable (from the bootstrap env) holding the token."
    )

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value


class FileDrop(_Model):
    member: str = Field(description="Index of the file in the bundle (files/<member>).")
    path: str = Field(description="Where it goes on the node: absolute, or workdir-relative.")
    mode: int = Field(0o644, ge=0, le=0o7777)


class MountPlan(_Model):
    source: str = Field(description="Object-storage prefix (s3://bucket/prefix, file://...).")
    path: str = Field(description="Node directory: absolute, or workdir-relative.")
    cache: bool = Field(True, description="Keep a copy on the node's disk across attempts.")
    upload_every_s: float | None = Field(
        None, gt=0, description="Upload the directory back this often while the stages run."
    )
    upload_at_end: bool = Field(False, description="Upload the directory back at the end.")


class CodePlan(_Model):
    bundle: BundleRef | None = None
    git: GitSource | None = None
    files: list[FileDrop] = Field(default_factory=list)
    mounts: list[MountPlan] = Field(default_factory=list)
    wait_s: float = Field(
        3600.0, gt=0, description="How long the agent waits for an upload before failing."
    )
    #: what the controller knew of the code (recorded in the manifest)
    source: str = Field("workdir", description="'workdir', 'git' or 'none'.")
    local_commit: str | None = Field(
        None, description="The commit of the local checkout the workdir came from, if any."
    )
    local_dirty: bool | None = Field(
        None, description="Whether that checkout had changes to tracked files."
    )
