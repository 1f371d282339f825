"""How the agent stops a stage whose script does not save on SIGTERM: its stop signal, its own
grace, a save signal and a save command (stand-ins written here, in the style of such tools)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from support.waiting import wait_until

from .helpers import TOKEN, make_plan

#: a training loop that ignores SIGTERM and saves its step on SIGUSR1 (then trains on)
SAVES_ON_USR1 = """
import signal, time, pathlib
step = 0
def save(*_):
    pathlib.Path("ckpt.txt").write_text(str(step))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, save)
pathlib.Path("ready").write_text("")
while True:
    step += 1
    time.sleep(0.01)
"""

#: nanoGPT-style: Ctrl-C (KeyboardInterrupt) saves and exits 75; SIGTERM is ignored
SAVES_ON_CTRL_C = """
import signal, sys, time, pathlib
signal.signal(signal.SIGTERM, signal.SIG_IGN)
step = 0
pathlib.Path("ready").write_text("")
try:
    while True:
        step += 1
        time.sleep(0.01)
except KeyboardInterrupt:
    pathlib.Path("ckpt.txt").write_text(str(step))
    sys.exit(75)
"""

#: saves when told through a file (what a save_command writes), exits 75 on SIGTERM
SAVES_ON_REQUEST = """
import signal, sys, time, pathlib
def stop(*_):
    saved = pathlib.Path("ckpt.txt").exists()
    pathlib.Path("term.txt").write_text("after save" if saved else "before save")
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
pathlib.Path("ready").write_text("")
while True:
    if pathlib.Path("save-now").exists() and not pathlib.Path("ckpt.txt").exists():
        pathlib.Path("ckpt.txt").write_text("saved")
    time.sleep(0.01)
"""


def _stage(tmp_path: Path, script: str, **fields) -> dict:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(script)
    return {"name": "train", "run": f"{sys.executable} train.py", **fields}


def _stop_when_ready(client, work: Path) -> float:
    wait_until(lambda: (work / "ready").exists(), 10, message="the stand-in to start")
    time.sleep(0.1)  # a few steps
    assert client.post("/stop")[0] == 202
    return time.monotonic()


def test_a_script_that_ignores_sigterm_saves_on_its_save_signal(tmp_path, start_agent):
    stage = _stage(tmp_path, SAVES_ON_USR1, save_signal="SIGUSR1", stop_grace_seconds=1.0)
    client = start_agent(make_plan(tmp_path, [stage], grace_seconds=20))
    work = tmp_path / "work"
    began = _stop_when_ready(client, work)
    status = client.wait_finished(timeout=15)
    took = time.monotonic() - began
    assert int((work / "ckpt.txt").read_text()) > 0
    # SIGTERM was ignored: SIGKILL at the end of the stage's own grace (1 s, not the run's 20)
    assert 0.9 <= took < 10, took
    assert client.stage(status, "train")["state"] == "stopped"
    assert status["phase"] == "stopped"


def test_without_a_save_signal_such_a_script_saves_nothing(tmp_path, start_agent):
    stage = _stage(tmp_path, SAVES_ON_USR1, stop_grace_seconds=0.5)
    client = start_agent(make_plan(tmp_path, [stage]))
    _stop_when_ready(client, tmp_path / "work")
    assert client.wait_finished(timeout=15)["phase"] == "stopped"
    assert not (tmp_path / "work" / "ckpt.txt").exists()


@pytest.mark.parametrize("prefix", ["", "cd . && "])
def test_a_script_that_saves_on_ctrl_c_is_stopped_with_sigint(tmp_path, start_agent, prefix):
    stage = _stage(tmp_path, SAVES_ON_CTRL_C, stop_signal="SIGINT")
    stage["run"] = prefix + stage["run"]
    client = start_agent(make_plan(tmp_path, [stage], grace_seconds=30))
    began = _stop_when_ready(client, tmp_path / "work")
    status = client.wait_finished(timeout=15)
    assert time.monotonic() - began < 10  # it exited on SIGINT, long before SIGKILL
    assert int((tmp_path / "work" / "ckpt.txt").read_text()) > 0
    train = client.stage(status, "train")
    assert (train["state"], train["exit_code"]) == ("preempted", 75)


def test_the_save_command_runs_before_the_stop_signal_with_the_stage_env(tmp_path, start_agent):
    command = (
        "echo saving $CORRAL_STAGE; touch save-now; while [ ! -f ckpt.txt ]; do sleep 0.05; done"
    )
    stage = _stage(tmp_path, SAVES_ON_REQUEST, save_command=command)
    client = start_agent(make_plan(tmp_path, [stage], grace_seconds=10))
    began = _stop_when_ready(client, tmp_path / "work")
    status = client.wait_finished(timeout=15)
    assert time.monotonic() - began < 5  # the stop signal followed the command at once
    assert (tmp_path / "work" / "term.txt").read_text() == "after save"
    assert client.stage(status, "train")["state"] == "preempted"
    log = client.get("/logs?stage=train")
    assert "saving train" in log["data"]


def test_a_save_command_that_hangs_gets_half_the_grace(tmp_path, start_agent):
    stage = _stage(tmp_path, SAVES_ON_REQUEST, save_command="sleep 60")
    client = start_agent(make_plan(tmp_path, [stage], grace_seconds=1.0))
    began = _stop_when_ready(client, tmp_path / "work")
    status = client.wait_finished(timeout=15)
    assert time.monotonic() - began < 8
    assert (tmp_path / "work" / "term.txt").read_text() == "before save"
    assert client.stage(status, "train")["state"] == "preempted"


def test_the_stage_sees_its_own_grace(tmp_path, start_agent):
    stage = {"name": "train", "run": "echo $CORRAL_GRACE_SECONDS > grace", "stop_grace_seconds": 7}
    client = start_agent(make_plan(tmp_path, [stage]), TOKEN)
    assert client.wait_finished()["phase"] == "succeeded"
    assert (tmp_path / "work" / "grace").read_text().strip() == "7.0"
