"""``volumes:``: persistent volumes that outlive a run (on a provider that offers
them), named by the user, created by corral when missing and never deleted with the run
(``corral volume rm`` deletes one)."""

from __future__ import annotations

import posixpath
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from corral.spec.bounds import size_at_most
from corral.spec.fields import Label, Name, Size
from corral.spec.models import SpecModel
from corral.spec.units import describe

#: the largest volume any provider makes (16 TiB)
MAX_VOLUME_GB = 16384.0
#: where a volume may not be mounted: the node's own system directories
_SYSTEM = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/proc", "/run", "/sbin", "/sys", "/usr")


def check_mount(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected an absolute path such as /data, got {describe(value)}")
    text = value.strip()
    if not text.startswith("/") or "\x00" in text:
        raise ValueError(f"the mount point must be an absolute path, got {text!r}")
    if ".." in text.split("/"):
        raise ValueError(f"the mount point must not contain '..', got {text!r}")
    path = posixpath.normpath(text)
    if path in _SYSTEM or any(path.startswith(s + "/") for s in _SYSTEM[1:]):
        raise ValueError(f"{path} is a system directory of the node: mount the volume elsewhere")
    return path


MountPath = Annotated[str, BeforeValidator(check_mount), Label("absolute path")]


class Volume(SpecModel):
    """A persistent volume mounted on the machine. It lives in one place (a data center, an
    availability zone): the run goes where it is, or where it can be created."""

    name: Name = Field(
        description="The volume's name (same characters as the job name). An existing volume "
        "of that name is used, else corral creates one."
    )
    size: Annotated[Size, Field(ge=1), size_at_most(MAX_VOLUME_GB)] = Field(
        50.0, description="Size of the volume corral creates when it is missing, e.g. '200GB'."
    )
    mount: MountPath = Field(description="Where the volume is on the machine, e.g. /data.")


def _unique(volumes: list[Volume]) -> list[Volume]:
    for attr in ("name", "mount"):
        seen: set[str] = set()
        for v in volumes:
            value = getattr(v, attr)
            if value in seen:
                raise ValueError(f"two volumes have the {attr} {value!r}")
            seen.add(value)
    return volumes


VolumeList = Annotated[list[Volume], AfterValidator(_unique), Label("list of volumes")]
