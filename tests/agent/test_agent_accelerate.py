"""``accelerate launch`` under the agent when the launcher keeps its process in its own group
(one process: ``--cpu``, or ``accelerate launch train.py`` on a machine with one GPU): the stage
is a launcher's (stopped, 75), and the save signal still reaches the script, not the launcher
(which would die of it) nor nothing."""

from __future__ import annotations

import json
import time

import psutil
import pytest

from support.waiting import wait_until

from .helpers import make_plan

pytest.importorskip("accelerate")

#: saves its step on SIGUSR1 and ignores SIGTERM (a script never told about preemption)
SCRIPT = """
import json, os, pathlib, signal, time
from accelerate import Accelerator
accelerator = Accelerator()
step = 0
def save(*_):
    pathlib.Path("ckpt.txt").write_text(str(step))
signal.signal(signal.SIGUSR1, save)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
keys = ("MASTER_PORT", "CUDA_VISIBLE_DEVICES")
info = {k: os.environ.get(k) for k in keys}
info.update(pid=os.getpid(), processes=accelerator.num_processes)
pathlib.Path("up.json").write_text(json.dumps(info))
while True:
    step += 1
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_a_one_process_accelerate_job_gets_the_save_signal_and_ends_stopped(tmp_path, start_agent):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(SCRIPT)
    stage = {
        "name": "train",
        "run": "accelerate launch --cpu --num_processes 1 --num_machines 1 "
        "--mixed_precision no --dynamo_backend no train.py",
        "gpus": 1,
        "save_signal": "SIGUSR1",
        "stop_grace_seconds": 3.0,
        "env": {"OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"},
    }
    client = start_agent(make_plan(tmp_path, [stage], devices=["0"], grace_seconds=60))
    wait_until(lambda: (work / "up.json").exists(), 90, message="the script to start")
    up = json.loads((work / "up.json").read_text())
    assert up["processes"] == 1 and up["CUDA_VISIBLE_DEVICES"] == "0"
    time.sleep(0.2)  # a few steps
    assert client.post("/stop")[0] == 202
    status = client.wait_finished(timeout=30)
    # the script saved on the save signal; accelerate itself was spared it
    assert int((work / "ckpt.txt").read_text()) > 0
    assert not psutil.pid_exists(up["pid"]) or psutil.Process(up["pid"]).status() == "zombie"
    train = client.stage(status, "train")
    assert (train["state"], train["exit_code"]) == ("preempted", 75)
    (ended,) = [e for e in client.events() if e["type"] == "stage.finished"]
    assert ended["data"]["launcher_exit_code"] != 75
