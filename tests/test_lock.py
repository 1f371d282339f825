"""dev.lock (made by scripts/lock.sh) pins every package the dev install needs, at versions
pyproject.toml allows, with the CPU build of torch that constraints.txt pins and no CUDA wheels:
a dependency added without refreshing the lock fails here, not next month."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _pins() -> dict[str, Version]:
    text = (ROOT / "dev.lock").read_text()
    return {
        canonicalize_name(name): Version(version)
        for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)
    }


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    return [r for r in map(Requirement, listed) if canonicalize_name(r.name) != "corral"]


def test_every_requirement_of_every_extra_is_pinned_within_its_range() -> None:
    pins = _pins()
    missing = [str(r) for r in _requirements() if canonicalize_name(r.name) not in pins]
    assert not missing, f"not in dev.lock (run scripts/lock.sh): {missing}"
    outside = [
        f"{r} (locked {pins[canonicalize_name(r.name)]})"
        for r in _requirements()
        if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)
    ]
    assert not outside, (
        f"dev.lock pins outside pyproject.toml's range (run scripts/lock.sh): {outside}"
    )


def test_torch_is_the_pinned_cpu_build_and_no_cuda_wheel_is_locked() -> None:
    pins = _pins()
    [wanted] = [
        Requirement(line)
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("torch")
    ]
    assert wanted.specifier.contains(pins["torch"]) and pins["torch"].local == "cpu"
    cuda = [n for n in pins if n in ("torchvision", "triton") or n.startswith("nvidia-")]
    assert cuda == ["nvidia-ml-py"]  # NVML's bindings (GPU discovery), not a CUDA library
