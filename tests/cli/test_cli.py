"""Every CLI command through the CLI runner, against a real store, controller and agents."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_PROVIDER

from .helpers import wait_state

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def spec(tmp_path: Path, body: str, name: str = "corral.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


HELLO = """
    name: hello
    stages:
      - name: prep
        run: echo "prep done"
      - name: train
        needs: [prep]
        run: echo "train on $CORRAL_STAGE"
"""


def test_validate_prints_the_resolved_spec_and_rejects_a_typo(tmp_path: Path) -> None:
    code, out, _ = cli("validate", spec(tmp_path, HELLO), "--json")
    assert code == 0
    assert json.loads(out)["name"] == "hello"
    bad = spec(tmp_path, "name: x\nrun: echo\nresorces: {}\n", "bad.yaml")
    code, _, err = cli("validate", bad)
    assert code == EXIT_BAD_INPUT
    assert "did you mean 'resources'" in err and "bad.yaml:3" in err
    assert "Traceback" not in err


def test_launch_wait_json_prints_the_final_run(tmp_path: Path) -> None:
    code, out, err = cli("launch", spec(tmp_path, HELLO), "--wait", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["state"] == "SUCCEEDED" and run["name"] == "hello"
    code, out, _ = cli("logs", run["id"])
    assert code == 0
    assert "prep | prep done" in out.replace("  ", " ") or "prep done" in out
    assert "train on train" in out


def test_launch_streams_logs_and_exits_1_when_the_run_fails(tmp_path: Path) -> None:
    code, out, _ = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: broken
        run: echo "about to fail"; exit 4
    """,
        ),
    )
    assert code == 1
    assert "about to fail" in out
    assert "FAILED" in out and "exited with code 4" in out


def test_launch_with_set_override(tmp_path: Path) -> None:
    code, out, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: knob
        env: {GREETING: hello}
        run: echo "greeting=$GREETING"
    """,
        ),
        "--set",
        "env.GREETING=bonjour",
        "--wait",
        "--json",
    )
    assert code == 0, err
    code, out, _ = cli("logs", json.loads(out)["id"])
    assert "greeting=bonjour" in out


def test_launch_more_gpus_than_exist_fails_at_once_with_a_clear_message(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    code, _, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: greedy
        resources: {gpus: "L40S:4"}
        run: echo never
    """,
        ),
    )
    assert code == EXIT_PROVIDER
    assert "asks for 4" in err and "has 2 L40S GPUs" in err
    code, out, _ = cli("ls", "--json")
    assert json.loads(out) == []  # nothing was recorded


def test_detach_status_ls_logs_and_cancel(tmp_path: Path) -> None:
    code, out, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: long
        run: echo started; sleep 60
    """,
        ),
        "--detach",
        "--json",
    )
    assert code == 0, err
    run_id = json.loads(out)["id"]
    data = wait_state(run_id, {"RUNNING"})
    assert data["state"] == "RUNNING"
    code, out, _ = cli("ls", "--json")
    assert [r["id"] for r in json.loads(out)] == [run_id]
    code, out, _ = cli("ls")
    assert run_id in out and "RUNNING" in out
    deadline = time.monotonic() + 20
    while not wait_state(run_id, {"RUNNING"})["stages"] and time.monotonic() < deadline:
        time.sleep(0.1)  # the controller copies the agent's stage table on its next tick
    code, out, _ = cli("status", run_id)
    assert code == 0 and "RUNNING" in out and "main" in out and "running" in out
    deadline = time.monotonic() + 20
    while "started" not in cli("logs", run_id)[1] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "started" in cli("logs", run_id)[1]
    code, out, _ = cli("cancel", run_id, "--wait", "--json")
    assert code == 0 and json.loads(out)["state"] == "CANCELLED"
    code, _, err = cli("cancel", run_id)
    assert code == EXIT_CONFLICT and "CANCELLED" in err


def test_stop_is_graceful_and_ends_stopped(tmp_path: Path) -> None:
    code, out, _ = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: stoppable
        run: trap 'echo got-term; exit 0' TERM; echo up; sleep 60 & wait
    """,
        ),
        "--detach",
        "--json",
    )
    run_id = json.loads(out)["id"]
    deadline = time.monotonic() + 30
    while "up" not in cli("logs", run_id)[1] and time.monotonic() < deadline:
        time.sleep(0.1)  # the stage is running and its trap is set
    code, out, _ = cli("stop", run_id, "--wait", "--json")
    assert code == 0
    run = json.loads(out)
    assert run["state"] == "STOPPED" and run["reason"] == "user"
    assert "got-term" in cli("logs", run_id)[1]


def test_unknown_run_is_not_found(tmp_path: Path) -> None:
    for args in (("status", "nope"), ("logs", "nope"), ("cancel", "nope"), ("stop", "nope")):
        code, _, err = cli(*args)
        assert code == EXIT_NOT_FOUND, args
        assert "nope" in err


def test_gpus_lists_the_declared_inventory(monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    code, out, _ = cli("gpus", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["L40S", "L40S"]
    assert all(r["run_id"] is None for r in rows)
    code, out, _ = cli("gpus")
    assert "L40S" in out and "free" in out


def test_controller_start_status_stop() -> None:
    code, out, _ = cli("controller", "status", "--json")
    assert json.loads(out)["running"] is False
    code, out, _ = cli("controller", "start", "--json")
    assert code == 0 and json.loads(out)["running"] is True
    code, out, _ = cli("controller", "status", "--json")
    assert json.loads(out)["running"] is True
    code, out, _ = cli("controller", "stop", "--json")
    assert code == 0 and json.loads(out)["stopped"] is True
    code, out, _ = cli("controller", "status", "--json")
    assert json.loads(out)["running"] is False


def test_a_bad_poll_interval_is_one_line_naming_it(monkeypatch) -> None:
    code, _, err = cli("controller", "--poll-interval", "0")
    assert code == EXIT_BAD_INPUT and "poll interval 0" in err and "Traceback" not in err
    monkeypatch.setenv("CORRAL_POLL_INTERVAL", "soon")
    code, _, err = cli("controller")
    assert code != 0 and "CORRAL_POLL_INTERVAL='soon'" in err and "Traceback" not in err


def test_a_bad_gpu_history_interval_is_one_line_naming_it(monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_GPU_HISTORY_EVERY", "often")
    code, _, err = cli("controller")
    assert code != 0 and "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "CORRAL_GPU_HISTORY_EVERY='often': expected a duration of 1 s or more "
            "(90s, 15m, 12h, 7d or seconds)"
        )
    )


@pytest.mark.parametrize(
    "command",
    [
        "launch",
        "status",
        "ls",
        "logs",
        "cancel",
        "stop",
        "gpus",
        "controller",
        "validate",
        "preflight",
        "agent",
    ],
)
def test_every_command_has_help(command: str) -> None:
    code, out, _ = cli(command, "--help")
    assert code == 0 and "Usage" in out


def test_bad_state_filter_is_bad_input() -> None:
    code, _, err = cli("ls", "--state", "RUNING")
    assert code == EXIT_BAD_INPUT and "RUNING" in err


def test_launch_warns_when_max_runtime_at_the_price_exceeds_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_LOCAL_PRICE_PER_HOUR", "2.0")
    code, _, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: pricey
        budget: {max_cost_usd: 5}
        limits: {max_runtime: 6h}
        run: echo hi
    """,
        ),
        "--wait",
        "--json",
    )
    assert code == 0
    assert "warning" in err and "$12.00" in err and "$5.00" in err


def test_a_missing_workdir_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    code, _, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: nowhere
        workdir: /nonexistent/dir
        run: echo hi
    """,
        ),
    )
    assert code == EXIT_BAD_INPUT and "/nonexistent/dir" in err
    assert json.loads(cli("ls", "--json")[1]) == []


def test_logs_of_an_attempt_that_does_not_exist_is_not_found(tmp_path: Path) -> None:
    code, out, _ = cli("launch", spec(tmp_path, HELLO), "--wait", "--json")
    run_id = json.loads(out)["id"]
    code, _, err = cli("logs", run_id, "--attempt", "9")
    assert code == EXIT_NOT_FOUND and "attempt 9" in err


def test_a_waiting_cli_restarts_a_controller_that_died(tmp_path: Path) -> None:
    import os
    import signal

    from corral.control.lock import running_pid

    code, out, _ = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: orphaned
        run: sleep 2; echo finished
    """,
        ),
        "--detach",
        "--json",
    )
    run_id = json.loads(out)["id"]
    deadline = time.monotonic() + 10
    while running_pid() in (None, -1) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(running_pid(), signal.SIGKILL)
    code, out, _err = cli("logs", run_id, "--follow")  # waits for the end: a controller is needed
    assert code == 0
    assert "finished" in out
    assert wait_state(run_id, {"SUCCEEDED"}, timeout=5)["state"] == "SUCCEEDED"


def test_a_controller_started_with_other_settings_is_restarted(tmp_path: Path, monkeypatch) -> None:
    from corral.control.lock import running_pid

    cli("controller", "start")
    first = running_pid()
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    code, _out, err = cli(
        "launch",
        spec(
            tmp_path,
            """
        name: gpu-job
        resources: {gpus: "L40S:2"}
        run: echo "gpus=$CUDA_VISIBLE_DEVICES"
    """,
        ),
        "--wait",
        "--json",
    )
    assert code == 0, err
    assert "CORRAL_FAKE_GPUS changed" in err
    assert running_pid() not in (None, first)
