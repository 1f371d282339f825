"""How the job's code, files, data and image reach the machine: ``code``, ``files``,
``mounts``, ``image`` and ``image_auth`` in the spec (see ``docs/shipping.md``)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator

from corral.spec.bounds import size_at_most
from corral.spec.fields import (
    Duration,
    Label,
    Problems,
    SecretName,
    Size,
    StorageUri,
    base_dir,
    check_storage,
)
from corral.spec.models import SpecModel
from corral.spec.units import type_name

#: the largest ``code.max_size`` (GB)
MAX_CODE_GB = 1024.0
#: the default ``code.max_size`` (GB): SkyPilot warns about workdirs past 1 GB too
DEFAULT_CODE_GB = 1.0
#: one ``files:`` entry may be at most this large (bytes): larger data belongs in ``mounts:``
MAX_FILE_BYTES = 16 * 1024 * 1024

_GIT_URL = re.compile(r"^(https?|ssh|git|file)://\S+$|^[\w.-]+@[\w.-]+:\S+$")


def _git_url(value: object) -> str:
    if not isinstance(value, str) or not _GIT_URL.match(value.strip()):
        raise ValueError(
            "expected a git URL: https://host/repo.git, ssh://..., git@host:repo.git or "
            "file:///path/repo.git"
        )
    text = value.strip()
    if re.match(r"^https?://[^/@]*:[^/@]*@", text):
        # never echo it: the URL holds a password or token
        raise ValueError("a git URL must not hold credentials: use code.token_secret")
    return text


GitUrl = Annotated[str, BeforeValidator(_git_url), Label("git URL")]
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@+-]{0,254}$")


def _ref(value: object) -> str:
    if not isinstance(value, str) or not _REF.match(value) or ".." in value:
        raise ValueError(f"invalid git ref (a branch, tag or commit), got {type_name(value)}")
    return value


GitRef = Annotated[str, BeforeValidator(_ref), Label("branch, tag or commit")]


class CodeSpec(SpecModel):
    """Where the job's code comes from on a machine that does not share this one's files
    (every provider but `local`): the workdir, packed and shipped, or a git repository."""

    git: GitUrl | None = Field(
        None,
        description="Clone this repository on the machine instead of shipping the workdir "
        "(https://, ssh://, git@host:repo or file://).",
    )
    ref: GitRef | None = Field(
        None,
        description="Branch, tag or commit of `git` (default: the remote's default branch). "
        "Resolved to a commit at launch; every attempt runs that commit.",
    )
    token_secret: SecretName | None = Field(
        None, description="Secret holding an access token for an https `git` URL."
    )
    local_changes: Literal["warn", "diff", "ignore"] = Field(
        "warn",
        description="With `git`: what to do when the workdir is a checkout with uncommitted "
        "changes to tracked files: 'warn', 'diff' (ship them as a patch applied on the "
        "machine) or 'ignore'.",
    )
    max_size: Annotated[Size, size_at_most(MAX_CODE_GB)] = Field(
        DEFAULT_CODE_GB,
        description="The largest workdir (plus `files`) shipped, before compression; a "
        "larger one is refused at launch with its largest paths listed.",
    )
    storage: StorageUri | None = Field(
        None,
        description="Object storage the packed code goes to once, for every attempt to "
        "fetch (default: checkpoints.storage; none: sent through the agent's port).",
    )

    @model_validator(mode="after")
    def _git_only(self) -> CodeSpec:
        if self.git is None:
            problems: list[tuple[tuple[str | int, ...], str]] = [
                ((name,), f"`{name}` needs `git`")
                for name in ("ref", "token_secret")
                if getattr(self, name) is not None
            ]
            if self.local_changes == "diff":
                problems.append((("local_changes",), "'diff' needs `git`"))
            if problems:
                raise Problems(problems)
        return self


def _node_path(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a path on the machine, got {type_name(value)}")
    text = value.strip()
    norm = posixpath.normpath(text)
    if not norm.startswith("/") and (norm == ".." or norm.startswith("../")):
        raise ValueError(f"'{text}' points outside the workdir (use an absolute path)")
    if text.startswith("~"):
        raise ValueError(f"'{text}': use an absolute path or one relative to the workdir")
    return norm


NodePath = Annotated[str, BeforeValidator(_node_path), Label("path on the machine")]


def _local_file(value: object, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a local file path, got {type_name(value)}")
    path = Path(value.strip()).expanduser()
    return str(path if path.is_absolute() else (base_dir(info) / path).resolve())


LocalFile = Annotated[str, BeforeValidator(_local_file), Label("local file")]


def _files(value: object) -> object:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of machine path: local file, got {type_name(value)}")
    return value


Files = Annotated[
    dict[NodePath, LocalFile], BeforeValidator(_files), Label("mapping machine path: local file")
]


class MountUpload(SpecModel):
    """Upload the mount's directory back to its source."""

    every: Duration | None = Field(None, description="While the stages run, this often.")
    at_end: bool = Field(True, description="Once more after the stages ended.")


def _source(value: object, info: ValidationInfo) -> str:
    text = check_storage(value, info)
    return text if "://" in text else "file://" + text


class Mount(SpecModel):
    """An object-storage prefix copied to a directory on the machine before the stages."""

    source: Annotated[str, BeforeValidator(_source), Label("storage URI")] = Field(
        description="s3://bucket/prefix (R2 and other S3-compatible stores through the "
        "endpoint variable, as for checkpoints), file:///path or a path on this machine."
    )
    path: NodePath = Field(description="Directory on the machine (absolute, or workdir-relative).")
    cache: bool = Field(
        True,
        description="Keep a copy on the machine's disk: a later attempt there downloads "
        "only what changed.",
    )
    upload: MountUpload | None = Field(
        None, description="Upload the directory back to `source` (on a schedule, at the end)."
    )


class ImageAuth(SpecModel):
    """Credentials of a private container registry (values from the secret store)."""

    username: str = Field(min_length=1, description="Registry user name.")
    password_secret: SecretName = Field(description="Secret holding the password or token.")
    registry: str | None = Field(
        None, description="Registry host (default: the image name's host)."
    )
