"""The engine invocation of a command run in the job's image (corral.agent.container): what is
on the command line (names, never values), the GPUs per engine, the engine's choice."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from corral.agent.container import ENV_COMMAND, WRAPPER, Container, job_names
from corral.wire.container import find_engine, no_engine_reason


def _box(engine: str) -> Container:
    return Container(
        engine=[engine],
        image="ghcr.io/me/train:1",
        workdir="/tmp",
        dirs=["/tmp", "/var", "/tmp", "/nonexistent"],
    )


def test_the_run_line_has_names_not_values_and_the_gpus_of_the_job_per_engine() -> None:
    env = {"PATH": "/host/bin", "HOME": "/root", "TOKEN": "s3cret", "LR": "0.1"}
    names = job_names(env, {"PATH": "/host/bin", "HOME": "/root", "TOKEN": "s3cret"}, ["TOKEN"])
    assert names == ["LR", "TOKEN"]  # the host's own PATH/HOME stay out
    box = _box("/usr/bin/docker")
    command, child_env = box.wrap("corral-r-1-train-1", "python train.py", env, names, ["2", "3"])
    argv = box.run_argv("corral-r-1-train-1", names, ["2", "3"])
    assert shlex.join(argv) in command  # started by the stage's bash, in a group of its own
    assert argv[0] == "/usr/bin/docker"
    assert argv[1:8] == [
        "run",
        "--rm",
        "--init",
        "--network",
        "host",
        "--name",
        "corral-r-1-train-1",
    ]
    assert (
        argv.count("--volume") == 2
        and "/var:/var" in argv
        and "/nonexistent:/nonexistent" not in argv
    )  # each directory once
    assert argv[argv.index("--workdir") + 1] == "/tmp"
    passed = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert passed == ["LR", "TOKEN", ENV_COMMAND, "CUDA_VISIBLE_DEVICES=0,1"]
    assert "s3cret" not in command and "0.1" not in command
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'
    assert argv[-4:] == ["ghcr.io/me/train:1", "bash", "-c", WRAPPER]
    assert child_env[ENV_COMMAND] == "python train.py" and child_env["TOKEN"] == "s3cret"

    podman = _box("podman").run_argv("n", names, ["0"])
    assert "--gpus" not in podman
    assert podman[podman.index("--device") + 1] == "nvidia.com/gpu=0"
    cpu_only = _box("podman").run_argv("n", names, [])
    assert "--device" not in cpu_only and "CUDA_VISIBLE_DEVICES=" in cpu_only


def test_the_engine_is_the_nodes_choice_then_the_plans_then_podman_then_docker(
    tmp_path: Path,
) -> None:
    for tool in ("podman", "docker"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    path = str(tmp_path)
    assert find_engine(None, {"PATH": path}) == [str(tmp_path / "podman")]
    assert find_engine("docker", {"PATH": path}) == [str(tmp_path / "docker")]
    chosen = {"PATH": path, "CORRAL_CONTAINER_ENGINE": "docker --log-level error"}
    assert find_engine("podman", chosen) == [str(tmp_path / "docker"), "--log-level", "error"]
    os.remove(tmp_path / "podman")
    assert find_engine(None, {"PATH": path}) == [str(tmp_path / "docker")]
    os.remove(tmp_path / "docker")
    assert find_engine(None, {"PATH": path}) is None
    assert find_engine("docker", {"PATH": path}) is None
    reason = no_engine_reason("img:1", {"PATH": path})
    assert "\n" not in reason and "img:1" in reason and "CORRAL_CONTAINER_ENGINE" in reason


def test_a_simulated_machines_gpus_are_not_given_to_the_engine(tmp_path: Path) -> None:
    """A fake cloud machine's GPU ids name no device (CORRAL_CONTAINER_GPUS=none): the container
    gets no GPU option, only its renumbered CUDA_VISIBLE_DEVICES."""
    from corral.agent.container import for_plan
    from corral.wire.container import ContainerPlan

    from .helpers import make_plan

    plan = make_plan(tmp_path, [{"name": "a", "run": "true"}]).model_copy(
        update={"container": ContainerPlan(image="img:1", engine="sh")}
    )
    for environ, real in [
        ({}, True),
        ({"CORRAL_CONTAINER_GPUS": "none"}, False),
    ]:
        box = for_plan(plan, str(tmp_path / "s"), str(tmp_path / "c"), {"PATH": "/bin", **environ})
        assert isinstance(box, Container) and box.real_gpus is real
        argv = box.run_argv("n", [], ["1"])
        assert ("nvidia.com/gpu=1" in argv) is real
        assert "CUDA_VISIBLE_DEVICES=0" in argv
