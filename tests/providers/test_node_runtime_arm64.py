"""corral's runtime for arm64 machines, packed on this x86_64 controller: an aarch64 CPython
(Debian 12's, from `scripts/aarch64_python.sh`) and the aarch64 wheels of the compiled
dependencies at the controller's versions. Every ELF file of the archive is aarch64; under
qemu-user (Debian's qemu-user-static, where installed) its python imports the agent; and the
node bootstrap picks the runtime of its `uname -m`.

The interpreter and the wheels come from package registries, which the tests do not reach: the
tests that need them are skipped, saying which script makes them, where they are not there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from corral import __version__
from corral.errors import BadInput
from corral.providers.common import runtime, wheel

DIR = Path(os.environ.get("CORRAL_TEST_AARCH64_DIR", Path.home() / ".cache/corral/aarch64"))
DIST = DIR / "cpython-3.11-aarch64-install_only.tar.gz"
WHEELS = DIR / "wheels"
EM_X86_64, EM_AARCH64 = 62, 183

needs_aarch64 = pytest.mark.skipif(
    runtime.machine_arch() != "x86_64" or not DIST.is_file() or not WHEELS.is_dir(),
    reason=f"no aarch64 CPython and wheels in {DIR}: `bash scripts/aarch64_python.sh` makes them "
    "(from Debian's arm64 packages and PyPI), on an x86_64 machine",
)


def _machine(data: bytes) -> int | None:
    """The ELF e_machine of a file's first bytes (None: not ELF)."""
    if data[:4] != b"\x7fELF":
        return None
    return int.from_bytes(data[18:20], "little")


@pytest.fixture(scope="module")
def arm64(tmp_path_factory: pytest.TempPathFactory) -> runtime.Runtime:
    tmp = tmp_path_factory.mktemp("arm64")
    built = wheel.build(tmp / "wheels")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(runtime.arch_env(runtime.ENV_DIST, "aarch64"), str(DIST))
        mp.setenv(runtime.arch_env(runtime.ENV_WHEELS, "aarch64"), str(WHEELS))
        return runtime.build(built.path, tmp / "cache", arch="aarch64")


@needs_aarch64
def test_the_arm64_runtime_holds_aarch64_binaries_only(arm64: runtime.Runtime) -> None:
    assert arm64.arch == "aarch64" and arm64.path.name.endswith("-aarch64.tar.gz")
    assert arm64.size < 150e6
    machines: dict[str, int] = {}
    with tarfile.open(arm64.path) as tf:
        for member in tf.getmembers():
            if member.isfile():
                head = tf.extractfile(member).read(20)  # type: ignore[union-attr]
                kind = _machine(head)
                if kind is not None:
                    machines[member.name] = kind
        marker = json.loads(tf.extractfile("corral-runtime/RUNTIME.json").read())  # type: ignore[union-attr]
    assert marker == {"arch": "aarch64", "corral": __version__, "python": "3.11"}
    assert machines["corral-runtime/python/bin/python3.11"] == EM_AARCH64
    assert any("pydantic_core" in n for n in machines)  # the SDK's compiled part, aarch64 too
    assert any("lib-dynload/_ssl" in n for n in machines)
    assert {n: m for n, m in machines.items() if m != EM_AARCH64} == {}


@needs_aarch64
@pytest.mark.skipif(shutil.which("qemu-aarch64-static") is None, reason="no qemu-user-static")
def test_the_arm64_runtime_imports_the_agent_under_qemu(
    arm64: runtime.Runtime, tmp_path: Path
) -> None:
    with tarfile.open(arm64.path) as tf:
        tf.extractall(tmp_path, filter="tar")
    python = tmp_path / "corral-runtime" / "python" / "bin" / "python3"
    code = "import platform, ssl, pydantic_core, corral.agent.main; print(platform.machine())"
    done = subprocess.run(
        ["qemu-aarch64-static", "-L", str(DIR / "sysroot"), str(python), "-E", "-s", "-c", code],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "aarch64"


@needs_aarch64
def test_the_bootstrap_picks_the_runtime_of_its_arch(
    arm64: runtime.Runtime, tmp_path: Path
) -> None:
    """A machine whose `uname -m` says aarch64 fetches the aarch64 runtime the controller
    shipped beside its own; it unpacks it (running it needs an arm64 machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (
        "bash",
        "cat",
        "cp",
        "mv",
        "rm",
        "mkdir",
        "tar",
        "gzip",
        "grep",
        "cut",
        "sha256sum",
    ):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (bin_dir / tool).symlink_to(found)
    (bin_dir / "uname").write_text("#!/bin/bash\necho aarch64\n")
    (bin_dir / "uname").chmod(0o755)
    script = tmp_path / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "CORRAL_NODE_HOME": str(tmp_path / "node"),
        "CORRAL_VERSION": __version__,
        # the controller's own (x86_64) runtime, and the aarch64 one beside it
        "CORRAL_RUNTIME_URL": "file:///nonexistent/x86_64.tar.gz",
        "CORRAL_RUNTIME_SHA256": "1" * 64,
        "CORRAL_RUNTIME_ARCH": "x86_64",
        "CORRAL_RUNTIME_URL_AARCH64": f"file://{arm64.path}",
        "CORRAL_RUNTIME_SHA256_AARCH64": arm64.sha256,
    }
    done = subprocess.run(
        [str(bin_dir / "bash"), str(script), "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    unpacked = tmp_path / "node" / "runtimes" / arm64.sha256[:16] / "corral-runtime"
    marker = json.loads((unpacked / "RUNTIME.json").read_text())
    assert marker["arch"] == "aarch64", done.stderr
    assert "runs on its own runtime" in done.stderr
    assert _machine((unpacked / "python" / "bin" / "python3.11").read_bytes()[:20]) == EM_AARCH64


def test_another_arch_without_its_python_is_refused_in_one_line(tmp_path: Path) -> None:
    built = wheel.build(tmp_path / "wheels")
    other = "aarch64" if runtime.machine_arch() != "aarch64" else "x86_64"
    with pytest.raises(BadInput) as exc:
        runtime.build(built.path, tmp_path / "cache", arch=other)
    assert exc.value.message.startswith(f"CORRAL_NODE_PYTHON_DIST_{other.upper()} is not set")
    assert "\n" not in exc.value.message
    with pytest.raises(BadInput, match="one of x86_64, aarch64"):
        runtime.arch_wheels("riscv64", tmp_path)


@needs_aarch64
def test_the_controller_ships_the_arm64_runtime_beside_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(runtime.arch_env(runtime.ENV_DIST, "aarch64"), str(DIST))
    monkeypatch.setenv(runtime.arch_env(runtime.ENV_WHEELS, "aarch64"), str(WHEELS))
    assert runtime.foreign_arches() == ["aarch64"]
    env = wheel.node_install_env(str(tmp_path / "storage"), tmp_path / "wheels")
    assert env["CORRAL_RUNTIME_ARCH"] == "x86_64"
    shipped = Path(env["CORRAL_RUNTIME_URL_AARCH64"].removeprefix("file://"))
    assert shipped.name == f"corral-runtime-{__version__}-aarch64.tar.gz"
    assert env["CORRAL_RUNTIME_SHA256_AARCH64"] != env["CORRAL_RUNTIME_SHA256"]
