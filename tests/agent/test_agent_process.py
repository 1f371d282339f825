"""``python -m corral.agent`` as a real process: start-up, agent.json, signals, exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from corral.agent.main import main
from support.waiting import wait_until

from .helpers import TOKEN, Client, make_plan


def _spawn_agent(plan_path: Path) -> subprocess.Popen:
    env = {**os.environ, "CORRAL_AGENT_TOKEN": TOKEN}
    return subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--plan", str(plan_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_agent_json(state_dir: Path, proc: subprocess.Popen, timeout: float = 10.0) -> dict:
    path = state_dir / "agent.json"

    def written() -> bool:
        assert proc.poll() is None, proc.communicate()
        return path.exists()

    wait_until(written, timeout, 0.02, "agent.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_agent_process_stops_its_stages_and_exits_on_a_signal(tmp_path, signum):
    plan = make_plan(tmp_path, [{"name": "train", "run": "env > env.txt; echo up; sleep 30"}])
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    try:
        info = _wait_for_agent_json(Path(plan.state_dir), proc)
        assert info["pid"] == proc.pid and info["url"] == f"http://127.0.0.1:{info['port']}"
        assert set(info) == {"pid", "port", "url", "started_at"}
        client = Client(info["url"])
        status = client.wait_until(lambda s: s["stages"][0]["state"] == "running")
        pid = status["stages"][0]["pid"]
        env_file = Path(plan.workdir) / "env.txt"
        client.wait_until(lambda s: env_file.exists() and "CORRAL_RUN_ID" in env_file.read_text())
        assert TOKEN not in env_file.read_text()
        proc.send_signal(signum)
        client.wait_finished()
        client.get("/events?after=0")  # a controller reads the last events: the agent exits
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not psutil.pid_exists(pid)
    events = [
        json.loads(line)
        for line in (Path(plan.state_dir) / "events.jsonl").read_text().splitlines()
    ]
    assert events[-1]["type"] == "attempt.finished" and events[-1]["data"]["phase"] == "stopped"
    requested = [e for e in events if e["type"] == "stop.requested"]
    assert requested[0]["data"]["reason"] == f"agent received {signal.Signals(signum).name}"


def test_agent_process_keeps_serving_after_the_attempt_ends(tmp_path):
    plan = make_plan(tmp_path, [{"name": "train", "run": "echo done"}])
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    try:
        client = Client(_wait_for_agent_json(Path(plan.state_dir), proc)["url"])
        assert client.wait_finished()["phase"] == "succeeded"
        time.sleep(0.3)
        assert proc.poll() is None
        assert client.get("/logs?stage=train")["eof"] is True
        client.get("/poll?events_after=0")
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_a_signalled_agent_serves_until_its_last_events_are_read(tmp_path):
    """A preemption notice that ends the job right after a stage ended must not take that
    stage's events with the agent: it exits once a controller has read them (or when signalled
    again), not at once."""
    plan = make_plan(tmp_path, [{"name": "train", "run": "echo up; sleep 30"}], grace_seconds=5)
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    try:
        client = Client(_wait_for_agent_json(Path(plan.state_dir), proc)["url"])
        client.wait_until(lambda s: s["stages"][0]["state"] == "running")
        proc.terminate()
        assert client.wait_finished()["phase"] == "stopped"
        time.sleep(1.0)
        assert proc.poll() is None  # the stage's end is not read yet (3 s at most)
        page = client.get("/events?after=0")
        assert page["events"][-1]["type"] == "attempt.finished"
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_a_second_signal_ends_a_lingering_agent_at_once(tmp_path):
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}], grace_seconds=5)
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    try:
        client = Client(_wait_for_agent_json(Path(plan.state_dir), proc)["url"])
        client.wait_until(lambda s: s["stages"][0]["state"] == "running")
        proc.terminate()
        client.wait_finished()
        time.sleep(0.5)
        assert proc.poll() is None
        proc.terminate()
        assert proc.wait(timeout=3) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_main_refuses_to_start_without_a_token(tmp_path, monkeypatch, capsys):
    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}])
    plan.dump(tmp_path / "plan.json")
    monkeypatch.delenv("CORRAL_AGENT_TOKEN", raising=False)
    assert main(["--plan", str(tmp_path / "plan.json")]) == 2
    assert "CORRAL_AGENT_TOKEN" in capsys.readouterr().err
    assert not (Path(plan.state_dir) / "agent.json").exists()


def test_main_rejects_an_invalid_plan_with_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CORRAL_AGENT_TOKEN", TOKEN)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"run_id": "r", "attempt": 0, "workdir": "/", "stages": []}))
    assert main(["--plan", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("corral agent: error: plan file") and "\n" not in err
    assert TOKEN not in err
    assert "CORRAL_AGENT_TOKEN" not in os.environ  # main() takes the token out of its env
    monkeypatch.setenv("CORRAL_AGENT_TOKEN", TOKEN)
    assert main(["--plan", str(tmp_path / "missing.json")]) == 2
    assert "missing.json does not exist" in capsys.readouterr().err
    plan = make_plan(tmp_path, [{"name": "a", "run": "x", "needs": ["a"]}])
    plan.dump(tmp_path / "cycle.json")
    monkeypatch.setenv("CORRAL_AGENT_TOKEN", TOKEN)
    assert main(["--plan", str(tmp_path / "cycle.json")]) == 2
    assert "needs itself" in capsys.readouterr().err


def test_agent_exits_when_no_controller_calls_after_the_job_ended(tmp_path):
    """A lost controller never leaves the machine running: after the job ends the agent waits
    controller_timeout_s for a call, then exits and runs the shutdown command."""
    marker = tmp_path / "powered-off"
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "echo done"}],
        controller_timeout_s=1.0,
        shutdown_command=f"touch {marker}",
    )
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    env = dict(os.environ, CORRAL_AGENT_TOKEN=TOKEN)
    proc = subprocess.run(
        [sys.executable, "-m", "corral.agent", "--plan", str(plan_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert "no controller called" in proc.stderr
    assert marker.exists()


def test_stages_die_with_their_agent(tmp_path):
    """kill -9 of the agent takes its stages with it: nothing runs on unwatched, and a new
    attempt cannot run the same job twice on one machine."""
    plan = make_plan(tmp_path, [{"name": "train", "run": "echo $$ > shell.pid; sleep 60"}])
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    pid_file = Path(plan.workdir) / "shell.pid"
    try:
        _wait_for_agent_json(Path(plan.state_dir), proc)
        wait_until(
            lambda: pid_file.exists() and pid_file.read_text().strip(), 10, 0.02, "shell.pid"
        )
        shell = psutil.Process(int(pid_file.read_text()))
        group = [shell, *shell.children(recursive=True)]
    finally:
        proc.kill()
        proc.wait(10)
    _, alive = psutil.wait_procs(group, timeout=5)
    assert alive == []


#: a launcher in the style of torchrun: its "rank" runs in a session of its own, ignoring SIGTERM
SESSION_RANK = "setsid bash -c 'trap \"\" TERM; echo $$ > rank.pid; sleep 300' & wait"


def _rank(work: Path) -> psutil.Process:
    pid_file = work / "rank.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, 0.02, "rank.pid")
    return psutil.Process(int(pid_file.read_text()))


def test_a_rank_in_a_session_of_its_own_dies_with_its_agent(tmp_path):
    plan = make_plan(tmp_path, [{"name": "train", "run": SESSION_RANK}])
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn_agent(plan_path)
    try:
        _wait_for_agent_json(Path(plan.state_dir), proc)
        rank = _rank(Path(plan.workdir))
        assert os.getpgid(rank.pid) == rank.pid  # a group (and session) of its own
    finally:
        proc.kill()
        proc.wait(10)
    _, alive = psutil.wait_procs([rank], timeout=5)
    assert alive == []


def test_a_rank_in_a_session_of_its_own_is_killed_at_the_end_of_the_grace(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": SESSION_RANK}]))
    rank = _rank(tmp_path / "work")
    assert client.post("/stop")[0] == 202
    assert client.wait_finished(timeout=15)["phase"] == "stopped"
    _, alive = psutil.wait_procs([rank], timeout=5)
    assert alive == []
