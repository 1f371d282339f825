"""A real container engine for the ``image:`` tests: Debian's podman, daemonless, as root.

This machine (a VM with cgroups v1+v2 "hybrid", no systemd) needs podman set up so: runc (crun
refuses hybrid cgroups), the cgroupfs manager, file events, vfs storage in a directory of the
tests' own, and container rlimits at or under the host's (``containers.conf``). The test image
(``localhost/corral-test:1``) is imported once from a root filesystem made of this machine's
bash, coreutils and their libraries, with an ``/etc/os-release`` of its own (the marker the tests
look for: the host has a different one); it is kept between runs.

:func:`engine` returns the environment that makes ``podman`` work here (``CORRAL_CONTAINER_ENGINE``
and podman's config files), or raises ``pytest.skip`` with why when podman or runc is missing or
cannot run a container on this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

IMAGE = "localhost/corral-test:1"
MARKER = 'PRETTY_NAME="corral test image"'
ROOT = Path(os.environ.get("CORRAL_TEST_PODMAN_ROOT", "/var/tmp/corral-test-podman"))
TOOLS = ("bash", "sh", "sleep", "cat", "ls", "env", "echo", "touch", "kill")
_state: dict[str, object] = {}


def _conf() -> dict[str, str]:
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        '[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nruntime = "runc"\n'
    )
    (ROOT / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{ROOT}/storage"\nrunroot = "{ROOT}/run"\n'
    )
    return {
        "CONTAINERS_CONF": str(ROOT / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(ROOT / "storage.conf"),
        "CORRAL_CONTAINER_ENGINE": "podman",
    }


def _rootfs_tar(dest: Path) -> None:
    """A tarball of a minimal root: this machine's tools, their libraries, a marker."""
    files: set[str] = set()
    for tool in TOOLS:
        path = shutil.which(tool)
        if path is None:
            continue
        files.add(path)
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        files.update(w for w in out.split() if w.startswith("/"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in sorted(files):
            target = root / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(name), target)
        for bin_dir in ("bin", "usr/bin"):  # a tool found in one is in both, as on Debian
            (root / bin_dir).mkdir(parents=True, exist_ok=True)
        for tool in TOOLS:
            for where in ("bin", "usr/bin"):
                found = [p for p in files if os.path.basename(p) == tool]
                link = root / where / tool
                if found and not link.exists():
                    link.symlink_to(found[0])
        for empty in ("tmp", "proc", "dev", "sys", "etc"):
            (root / empty).mkdir(exist_ok=True)
        (root / "etc/os-release").write_text(f"ID=corraltest\n{MARKER}\n")
        with tarfile.open(dest, "w") as tar:
            tar.add(root, arcname=".")


def engine() -> dict[str, str]:
    if "env" in _state:
        return dict(_state["env"])  # type: ignore[call-overload]
    if "skip" in _state:
        pytest.skip(str(_state["skip"]))
    try:
        env = _prepare()
    except _Unusable as exc:
        _state["skip"] = str(exc)
        pytest.skip(str(exc))
    _state["env"] = env
    return dict(env)


class _Unusable(Exception):
    """This machine cannot run podman for the tests (the message says why)."""


def _prepare() -> dict[str, str]:
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            raise _Unusable(f"{tool} is not installed (apt-get install -y podman runc)")
    env = {**os.environ, **_conf()}
    exists = subprocess.run(["podman", "image", "exists", IMAGE], env=env, capture_output=True)
    if exists.returncode != 0:
        tar = ROOT / "rootfs.tar"
        _rootfs_tar(tar)
        imported = subprocess.run(
            ["podman", "import", str(tar), IMAGE], env=env, capture_output=True, text=True
        )
        if imported.returncode != 0:
            raise _Unusable(f"podman import failed here: {imported.stderr.strip()[-200:]}")
    probe = subprocess.run(
        ["podman", "run", "--rm", IMAGE, "cat", "/etc/os-release"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if MARKER not in probe.stdout:
        raise _Unusable(f"podman cannot run a container here: {probe.stderr.strip()[-200:]}")
    return _conf()
