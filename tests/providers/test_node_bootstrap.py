"""corral on a machine that lacks it: the controller's wheel of itself, and the node bootstrap
(the image's entrypoint, the start of every cloud machine) run as a plain process in a
temporary root: an image with this corral runs it as is; one without gets exactly this version
from the controller's wheel (checked by sha256), then starts the agent from its environment."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from agent.helpers import make_plan
from corral import __version__
from corral.agent.boot import Delivered, delivery_env
from corral.providers.common import wheel
from support.waiting import wait_until


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """A fresh machine's environment: no PYTHONPATH, no CORRAL_HOME of the controller."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8", **extra}


def _script(tmp: Path) -> Path:
    path = tmp / "node-bootstrap.sh"
    path.write_text(wheel.bootstrap_script())
    return path


def test_the_wheel_is_this_corral_and_nothing_compiled(tmp_path: Path) -> None:
    built = wheel.build(tmp_path / "cache")
    assert built.name == f"corral-{__version__}-py3-none-any.whl"
    assert hashlib.sha256(built.path.read_bytes()).hexdigest() == built.sha256
    again = wheel.build(tmp_path / "cache")
    assert again.path == built.path and again.sha256 == built.sha256  # by content, once
    with zipfile.ZipFile(built.path) as zf:
        names = zf.namelist()
        meta = zf.read(f"corral-{__version__}.dist-info/METADATA").decode()
    assert "corral/__init__.py" in names and "corral/providers/common/node_bootstrap.sh" in names
    assert not [n for n in names if n.endswith((".so", ".pyc")) or "__pycache__" in n]
    assert f"Version: {__version__}" in meta and "Requires-Dist: pydantic" in meta


def test_an_image_with_this_corral_runs_it_as_it_is(tmp_path: Path) -> None:
    env = _env(tmp_path, CORRAL_VERSION=__version__, CORRAL_NODE_HOME=str(tmp_path / "node"))
    if os.environ.get("PYTHONPATH"):  # a checkout's corral is "installed" through it
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env["CORRAL_PYTHON"] = sys.executable
    done = subprocess.run(
        ["bash", str(_script(tmp_path)), "-c", "import corral; print(corral.__version__)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __version__ and "installing" not in done.stderr
    assert not (tmp_path / "node" / "venv").exists()


def test_a_machine_without_python_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        ["/bin/bash", str(_script(tmp_path))],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 78 and "no python on this machine" in done.stderr


def test_a_python_older_than_3_11_is_said_once_and_ends_the_bootstrap_with_78(
    tmp_path: Path,
) -> None:
    """An image whose python3 is 3.10 (Ubuntu 22.04's) cannot run corral without corral's own
    runtime (none was shipped here): one line says so, no venv is made, nothing is installed,
    and the exit status tells the caller that no retry on this image can help."""
    image_bin = tmp_path / "bin"
    image_bin.mkdir()
    python3 = image_bin / "python3"
    python3.write_text('#!/bin/sh\necho "$@" >> "$HOME/asked"\necho 3.10\n')
    python3.chmod(0o755)
    node = tmp_path / "node"
    done = subprocess.run(
        ["/bin/bash", str(_script(tmp_path))],
        env=_env(tmp_path, PATH=f"{image_bin}:/usr/bin:/bin", CORRAL_NODE_HOME=str(node)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78
    assert done.stderr.splitlines() == [
        "corral bootstrap: python3 3.10 is older than 3.11 and no corral runtime was shipped "
        "(give the run object storage, or use an image with python 3.11 or later)",
        "corral: this machine cannot boot corral (exit 78)",
    ]
    assert (tmp_path / "asked").read_text().count("\n") == 1  # asked its version, nothing else
    assert not node.exists()


def _dependencies_of_this_environment(tmp_path: Path) -> Path:
    """A folder holding what the environment running the tests has installed (links), less
    corral itself and pip: the packages a user's image would hold besides python."""
    deps = tmp_path / "image-packages"
    deps.mkdir()
    dirs = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    for folder in dirs:
        for entry in sorted(folder.iterdir()):
            name = entry.name.lower()
            if (
                name.startswith(("corral", "__editable__", "_corral", "pip", "__pycache__"))
                or name.endswith(".pth")
                or (deps / entry.name).exists()
            ):
                continue
            (deps / entry.name).symlink_to(entry)
    return deps


def _image_without_corral(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A python that cannot import corral (a user's image) and the environment it boots with.

    The image's packages are those of the environment running the tests (a virtual environment
    or the system's python alike), seen through PYTHONPATH, as a venv made on the node with
    --system-site-packages sees an image's own. Returns its python and PYTHONPATH."""
    img = tmp_path / "image"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(img)], check=True, env=_env(tmp_path)
    )
    extra = {"PYTHONPATH": str(_dependencies_of_this_environment(tmp_path))}
    python = img / "bin" / "python"
    assert subprocess.run([python, "-c", "import corral"], env=_env(tmp_path, **extra)).returncode
    assert not subprocess.run(
        [python, "-c", "import typer"], env=_env(tmp_path, **extra)
    ).returncode
    return python, extra


@pytest.mark.slow
def test_an_image_without_corral_gets_the_controllers_wheel_then_starts_the_agent(
    tmp_path: Path,
) -> None:
    built = wheel.build(tmp_path / "cache")
    python, image_env = _image_without_corral(tmp_path)
    script = _script(tmp_path)
    node = tmp_path / "node"
    base = _env(
        tmp_path,
        **image_env,
        CORRAL_PYTHON=str(python),
        CORRAL_NODE_HOME=str(node),
        CORRAL_VERSION=__version__,
        CORRAL_WHEEL_URL=f"file://{built.path}",
        CORRAL_WHEEL_NAME=built.name,
        CORRAL_PIP_ARGS="--no-index",  # hermetic: corral's dependencies are in the image
    )
    wrong = subprocess.run(
        ["bash", str(script)],
        env={**base, "CORRAL_WHEEL_SHA256": "0" * 64, "CORRAL_NODE_HOME": str(tmp_path / "n2")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrong.returncode != 0 and f"not {'0' * 64}" in wrong.stderr
    assert not list((tmp_path / "n2").rglob("corral-*.whl"))
    # the entrypoint as a container runs it: no arguments, the plan and token in the env
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = make_plan(
        tmp_path, [{"name": "main", "run": "echo hi"}], workdir="/work", state_dir="/state"
    ).model_copy(update={"controller_timeout_s": None})
    env = {
        **base,
        "CORRAL_WHEEL_SHA256": built.sha256,
        **delivery_env(Delivered(plan=plan.model_dump(mode="json"), token="tok-entrypoint")),
        "CORRAL_AGENT_BIND": f"127.0.0.1:{port}",
        "CORRAL_NODE_ROOT": str(tmp_path / "root"),
    }
    with open(tmp_path / "entrypoint.log", "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        headers = {"Authorization": "Bearer tok-entrypoint"}

        def health():
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", headers=headers, timeout=2)
            except httpx.HTTPError:
                assert proc.poll() is None, (tmp_path / "entrypoint.log").read_text()
                return None

        answer = wait_until(health, 300, 0.5, "the agent started by the entrypoint")
        assert answer.json()["version"] == __version__
        status = wait_until(
            lambda: (
                httpx.get(f"http://127.0.0.1:{port}/status", headers=headers).json()
                if httpx.get(f"http://127.0.0.1:{port}/status", headers=headers).json()[
                    "finished_at"
                ]
                else None
            ),
            60,
            0.2,
            "the attempt to end",
        )
        assert status["phase"] == "succeeded"
        pid_python = os.readlink(f"/proc/{proc.pid}/exe")
        assert Path(pid_python).resolve() == (node / "venv" / "bin" / "python").resolve() or (
            str(node) in " ".join(Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0"))
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        out.close()
    log = (tmp_path / "entrypoint.log").read_text()
    assert f"installing corral {__version__}" in log and built.path.name not in log.replace(
        f"corral-{__version__}", ""
    )
    assert (tmp_path / "root" / "state" / "plan.json").stat().st_mode & 0o777 == 0o600
    # the next boot on this machine finds the venv: nothing is installed again
    again = subprocess.run(
        ["bash", str(script), "-c", "import corral, sys; print(corral.__file__)"],
        env={**base, "CORRAL_WHEEL_SHA256": built.sha256},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(str(node / "venv")) and "installing" not in again.stderr
