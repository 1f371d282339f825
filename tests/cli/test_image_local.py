"""`image:` on the local provider: the stages run in the image through a container engine (a
real podman, when this machine can run one), or the launch is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.errors import EXIT_PROVIDER
from support import fake_engine, podman
from support.waiting import wait_until

from .test_cli import cli, spec


@pytest.fixture
def engine(monkeypatch) -> dict[str, str]:
    env = podman.engine()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _logs_until(run_id: str, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = cli("logs", run_id)[1]
        if text in out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never came in the logs of {run_id}:\n{out}")


def _containers(env: dict[str, str], run_id: str, status: bool = False) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}" + ("={{.Status}}" if status else "")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [n for n in out.splitlines() if run_id in n]


def test_a_local_run_with_image_runs_its_setup_and_stages_in_the_image(
    tmp_path: Path, engine, monkeypatch
) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cret-value-xyz")
    (tmp_path / "data.txt").write_text("from the workdir\n")
    body = f"""
        name: imaged
        image: {podman.IMAGE}
        secrets: [MY_TOKEN]
        env: {{GREETING: hello-from-spec}}
        setup:
          - cat /etc/os-release > setup-saw.txt
        stages:
          - name: train
            run: >-
              cat /etc/os-release; cat data.txt; cat setup-saw.txt;
              echo "greeting=$GREETING pwd=$PWD";
              test -n "$MY_TOKEN" && echo token-is-set;
              echo "stage=$CORRAL_STAGE ckpt=$CORRAL_CHECKPOINT_DIR";
              touch "$CORRAL_CHECKPOINT_DIR/made-in-image"
    """
    code, out, err = cli("launch", spec(tmp_path, body), "--wait", "--json")
    run = json.loads(out)
    assert run["state"] == "SUCCEEDED", (run.get("reason"), cli("status", run["id"])[1])
    assert code == 0, err
    logs = cli("logs", run["id"])[1]
    assert logs.count(podman.MARKER) == 2  # the stage's cat, and what the setup saw
    assert "from the workdir" in logs and f"greeting=hello-from-spec pwd={tmp_path}" in logs
    assert "token-is-set" in logs and "s3cret-value-xyz" not in logs
    assert "stage=train" in logs
    ckpt = logs.split("ckpt=")[1].split()[0]
    assert (Path(ckpt) / "made-in-image").exists()  # the checkpoint dir is the host's
    assert _containers(engine, run["id"]) == []  # removed at the end


def test_a_stop_reaches_the_job_in_the_image_and_it_saves_first(tmp_path: Path, engine) -> None:
    body = f"""
        name: stoppable
        image: {podman.IMAGE}
        run: >-
          trap 'echo got-term; sleep 0.5; echo saved > saved.txt; exit 75'
          TERM; cat /etc/os-release; echo up; while :; do sleep 0.1; done
    """
    code, out, err = cli("launch", spec(tmp_path, body), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    logs = _logs_until(run_id, "up")
    assert podman.MARKER in logs
    code, out, _ = cli("stop", run_id, "--wait", "--json")
    assert code == 0
    run = json.loads(out)
    assert run["state"] == "STOPPED" and run["reason"] == "user", run
    logs = cli("logs", run_id)[1]
    assert "got-term" in logs

    events = Path(os.environ["CORRAL_HOME"]).glob("local/instances/*/agent/events.jsonl")
    finished = [
        e
        for path in events
        for e in map(json.loads, path.read_text().splitlines())
        if e["type"] == "stage.finished"
    ]
    [train] = finished
    assert train["data"]["exit_code"] == 75, train  # the job's code, through the engine
    assert (tmp_path / "saved.txt").read_text() == "saved\n"  # it saved before it exited
    assert _containers(engine, run_id) == []


def test_an_agent_killed_outright_leaves_no_container_running(tmp_path: Path, engine) -> None:
    """SIGKILL to the agent: its stage shim hears of it (the parent-death signal), has the
    engine remove the container (whose client's death would not stop it), then kills its
    group. Without that, the job would run on unwatched."""
    body = f"""
        name: orphan
        image: {podman.IMAGE}
        run: echo up; while :; do sleep 0.1; done
    """
    code, out, err = cli("launch", spec(tmp_path, body), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    _logs_until(run_id, "up")
    assert len(_containers(engine, f"corral-{run_id}-1-")) == 1
    [record] = Path(os.environ["CORRAL_HOME"]).glob(f"local/instances/{run_id}-a1/instance.json")
    os.kill(json.loads(record.read_text())["pid"], signal.SIGKILL)
    first = f"corral-{run_id}-1-"  # the attempt's (the run may be relaunched: a lost machine)
    wait_until(
        lambda: not _containers(engine, first),
        30,
        0.2,
        lambda: f"the container to be removed: {_containers(engine, first, status=True)}",
    )
    cli("cancel", run_id, "--wait")  # the run may have ended already (its machine was lost)
    wait_until(lambda: not _containers(engine, run_id), 30, 0.2, "no container of the run left")


@pytest.mark.parametrize(
    "engine_env, says",
    [
        ({"CORRAL_CONTAINER_ENGINE": "/nonexistent/podman"}, "is not a command on this machine"),
        ({"PATH": "/nonexistent"}, "neither podman nor docker is on PATH"),
    ],
)
def test_without_an_engine_a_run_with_image_is_refused_in_one_line(
    tmp_path: Path, monkeypatch, engine_env, says
) -> None:
    path = spec(tmp_path, "name: boxed\nimage: python:3.11-slim\nrun: echo never\n")
    for key, value in engine_env.items():
        monkeypatch.setenv(key, value)
    code, _, err = cli("launch", path)
    assert code == EXIT_PROVIDER, err
    assert says in err and "python:3.11-slim" in err and "Traceback" not in err
    lines = [line for line in err.splitlines() if "container engine" in line]
    assert len(lines) == 1, err
    assert "local: local:" not in err
    code, out, _ = cli("ls", "--json")
    assert json.loads(out) == []  # nothing ran, nothing was recorded
    code, out, _ = cli("preflight", path, "--json")  # said before any launch, too
    [launch] = [c for c in json.loads(out)["checks"] if c["name"] == "launch"]
    assert code != 0 and launch["status"] == "fail" and says in launch["detail"]


def test_a_spec_without_image_still_runs_on_the_host(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"  # bash and cat, no engine: none is needed
    bin_dir.mkdir()
    for tool in ("bash", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    body = "name: plain\nrun: cat /etc/os-release\n"
    code, out, err = cli("launch", spec(tmp_path, body), "--wait", "--json")
    assert code == 0, err
    logs = cli("logs", json.loads(out)["id"])[1]
    assert Path("/etc/os-release").read_text().splitlines()[0] in logs
    assert podman.MARKER not in logs


def test_registry_credentials_reach_only_the_engines_login_on_stdin(
    tmp_path: Path, monkeypatch
) -> None:
    """A recording engine (support/fake_engine.py: it runs the command on the host): the
    password from the secret store goes to ``login --password-stdin`` and nowhere else."""
    engine_dir = tmp_path / "engine"
    fake_engine.install(engine_dir, "podman")
    monkeypatch.setenv("CORRAL_CONTAINER_ENGINE", str(engine_dir / "podman"))
    monkeypatch.setenv("REG_PASS", "reg-pass-456")
    body = """
        name: private
        image: registry.example.com/team/train:2
        image_auth: {username: bot, password_secret: REG_PASS}
        run: echo "in the image [$CUDA_VISIBLE_DEVICES]"; env | grep -c REG_PASS || true
    """
    code, out, err = cli("launch", spec(tmp_path, body), "--wait", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["state"] == "SUCCEEDED", run.get("reason")
    calls = fake_engine.calls(engine_dir)
    assert [c["argv"][0] for c in calls][:4] == ["image", "login", "pull", "run"]
    assert calls[1]["argv"][-1] == "registry.example.com" and calls[1]["stdin"] == "reg-pass-456"
    assert not any("reg-pass-456" in " ".join(c["argv"]) for c in calls)
    passed = [a for c in calls for a in c["argv"]]
    assert "CORRAL_IMAGE_PASSWORD" not in passed and "REG_PASS" not in passed
    logs = cli("logs", run["id"])[1]
    assert "in the image []" in logs and "reg-pass-456" not in logs
    home = Path(os.environ["CORRAL_HOME"])
    for path in home.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".log", ".out"):
            assert "reg-pass-456" not in path.read_text(errors="replace"), path
