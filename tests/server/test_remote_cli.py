"""The CLI against a remote server (CORRAL_SERVER + CORRAL_TOKEN), as a user runs it: a
subprocess whose own CORRAL_HOME holds nothing but its cache of packed workdirs talking to a
real uvicorn on loopback: launch, ls, logs (followed and not), status, stop, cancel, with the
local CLI's exit codes for the server's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.conftest import Api, free_port

pytestmark = pytest.mark.slow  # a CLI process per step

CLI = [sys.executable, "-m", "corral.cli"]


@pytest.fixture
def cli(api: Api, tmp_path: Path):
    elsewhere = tmp_path / "client-home"  # the CLI's own home: only its bundle cache
    elsewhere.mkdir()
    env = dict(os.environ, CORRAL_HOME=str(elsewhere), CORRAL_SERVER=api.url)
    env["CORRAL_TOKEN"] = api.token
    env.pop("CORRAL_DATABASE_URL", None)

    def run(*args: str, token: str | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
        e = dict(env, **extra)
        if token is not None:
            e["CORRAL_TOKEN"] = token
        return subprocess.run(
            [*CLI, *args], env=e, capture_output=True, text=True, timeout=120, cwd=tmp_path
        )

    yield run
    written = {p.name for p in elsewhere.iterdir()}
    assert written <= {"code"}, "remote mode wrote to the local CORRAL_HOME beyond its code cache"


def test_launch_ls_logs_status_against_a_remote_server(cli, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        'name: remote-job\nrun: "echo one && echo two && sleep 1 && echo three"\n'
    )
    launched = cli("launch", "job.yaml", "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    run = json.loads(launched.stdout)
    assert run["name"] == "remote-job" and run["state"] in {"PROVISIONING", "RUNNING"}

    followed = cli("logs", "-f", run["id"])
    assert followed.returncode == 0, followed.stderr
    assert [line.split("|", 1)[1].strip() for line in followed.stdout.splitlines()] == [
        "one",
        "two",
        "three",
    ]
    assert f"{run['id']} SUCCEEDED" in followed.stderr

    listed = cli("ls", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [run["id"]]
    table = cli("ls", "--all")
    assert run["id"] in table.stdout and "SUCCEEDED" in table.stdout

    status = cli("status", "remote-job", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "SUCCEEDED"
    shown = cli("status")  # the newest run
    assert run["id"] in shown.stdout and "SUCCEEDED" in shown.stdout
    logs = cli("logs", run["id"], "--timestamps")
    assert logs.stdout.count("main") == 3 and "three" in logs.stdout

    again = cli("stop", run["id"])  # an ended run: the same conflict (exit 4) as locally
    assert again.returncode == 4 and "already" in again.stderr.lower()
    missing = cli("status", "no-such-run")
    assert missing.returncode == 3 and "no run matches" in missing.stderr


def test_launch_follows_and_stop_waits_remotely(cli, tmp_path: Path) -> None:
    (tmp_path / "quick.yaml").write_text('name: quick\nrun: "echo hello from far away"\n')
    launched = cli("launch", "quick.yaml")
    assert launched.returncode == 0, launched.stderr
    assert "hello from far away" in launched.stdout and "SUCCEEDED" in launched.stdout

    (tmp_path / "long.yaml").write_text('name: long\nrun: "sleep 60"\n')
    run = json.loads(cli("launch", "long.yaml", "-d", "--json").stdout)
    stopped = cli("stop", run["id"], "--wait", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "STOPPED"


def test_remote_mode_errors_are_one_line_with_the_local_exit_codes(
    cli, api: Api, tmp_path: Path
) -> None:
    (tmp_path / "bad.yaml").write_text("name: bad\nrun: echo\nlimits: {max_runtime: banana}\n")
    bad = cli("launch", "bad.yaml")
    assert bad.returncode == 2 and "limits.max_runtime" in bad.stderr

    wrong = cli("ls", token="corral_wrong")
    assert wrong.returncode == 2 and "CORRAL_TOKEN" in wrong.stderr
    reader = cli("stop", "anything", token=api.read_only_token)
    assert reader.returncode == 2 and "read-only" in reader.stderr
    no_token = cli("ls", token="")
    assert no_token.returncode == 2
    assert "CORRAL_SERVER is set but CORRAL_TOKEN is not" in no_token.stderr
    gone = cli("ls", CORRAL_SERVER=f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == 6 and "cannot be reached" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
    odd = cli("ls", CORRAL_SERVER="ftp://example")
    assert odd.returncode == 2 and "CORRAL_SERVER='ftp://example'" in odd.stderr


def test_budget_caps_are_set_listed_and_removed_on_the_server(cli) -> None:
    made = cli("budget", "set", "--project", "llm", "50", "--warn-at", "0.8")
    assert made.returncode == 0, made.stderr
    assert "cap of project llm: $50.00" in made.stdout
    listed = cli("budget", "--json")
    assert listed.returncode == 0, listed.stderr
    [cap] = json.loads(listed.stdout)["caps"]
    assert (cap["scope"], cap["subject"], cap["warn_at"], cap["set_by"]) == (
        "project",
        "llm",
        0.8,
        "test-writer",
    )
    assert cli("budget", "rm", "--project", "llm").returncode == 0
    gone = cli("budget", "rm", "--project", "llm")
    assert gone.returncode != 0 and "no spending cap for project 'llm'" in gone.stderr
    assert json.loads(cli("budget", "--json").stdout)["caps"] == []
