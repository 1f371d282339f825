"""A two-rank ``torchrun`` job (gloo on CPU) under the agent: the ranks get the stage's GPU
count and a free port, and a stop reaches every rank as one stage (save signal to each rank,
the stop signal through torchrun, SIGKILL to ranks that ignore it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from support.waiting import wait_until

from .helpers import make_plan

pytest.importorskip("torch.distributed")

#: each rank joins the gloo group, records its env, saves its step on SIGUSR1 and ignores
#: SIGTERM (a script that was never told about preemption)
RANK = """
import json, os, pathlib, signal, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
step = 0
def save(*_):
    pathlib.Path(f"ckpt-{rank}.txt").write_text(str(step))
signal.signal(signal.SIGUSR1, save)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
info = {k: os.environ.get(k) for k in keys}
dist.barrier()
pathlib.Path(f"rank-{rank}.json").write_text(json.dumps({**info, "pid": os.getpid()}))
while True:
    step += 1
    time.sleep(0.01)
"""


def _ranks(work: Path) -> list[dict]:
    return [json.loads((work / f"rank-{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_a_two_rank_torchrun_job_is_started_and_stopped_as_one_stage(tmp_path, start_agent):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(RANK)
    stage = {
        "name": "train",
        "run": "echo $MASTER_PORT > port.txt && torchrun train.py",
        "gpus": 2,
        "save_signal": "SIGUSR1",
        "stop_grace_seconds": 3.0,
        "env": {"OMP_NUM_THREADS": "1"},
    }
    plan = make_plan(tmp_path, [stage], devices=["0", "1"], grace_seconds=60)
    client = start_agent(plan)
    wait_until(
        lambda: all((work / f"rank-{r}.json").exists() for r in (0, 1)),
        90,
        message="both ranks to start",
    )
    port = (work / "port.txt").read_text().strip()
    ranks = _ranks(work)
    assert sorted(r["RANK"] for r in ranks) == ["0", "1"]  # PET_NPROC_PER_NODE from gpus: 2
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["MASTER_PORT"] for r in ranks} == {port} and port != "29500"
    assert {r["CUDA_VISIBLE_DEVICES"] for r in ranks} == {"0,1"}
    time.sleep(0.2)  # a few steps
    began = time.monotonic()
    assert client.post("/stop")[0] == 202
    status = client.wait_finished(timeout=30)
    took = time.monotonic() - began
    for r in (0, 1):  # each rank saved on the save signal (torchrun itself was spared it)
        assert int((work / f"ckpt-{r}.txt").read_text()) > 0
    # the ranks ignored SIGTERM: SIGKILL reached them at the stage's grace, not torchrun's 30 s
    assert 2.5 <= took < 20, took
    for rank in ranks:
        assert not psutil.pid_exists(rank["pid"]) or _zombie(rank["pid"])
    # torchrun's own code (here 137: it waits 30 s for ranks that ignore SIGTERM, and was killed
    # at the grace; 1 when it ends on a signal) says nothing of its ranks: the stage the agent
    # stopped ends as stopped and resumable (75), as a job that exits 75 on the stop does;
    # torchrun's code is kept in the event
    train = client.stage(status, "train")
    assert (train["state"], train["exit_code"]) == ("preempted", 75)
    assert (status["phase"], status["exit_code"]) == ("stopped", None)
    (ended,) = [e for e in client.events() if e["type"] == "stage.finished"]
    assert ended["data"]["exit_code"] == 75 and ended["data"]["launcher_exit_code"] == 137


#: rank 1 fails on its own (exit 3) once both ranks are up
FAILING = """
import os, pathlib, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
if rank == 1:
    sys.exit(3)
while True:
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_a_torchrun_job_whose_rank_fails_on_its_own_is_a_failure(tmp_path, start_agent):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(FAILING)
    stage = {
        "name": "train",
        "run": "torchrun train.py",
        "gpus": 2,
        "stop_grace_seconds": 3.0,
        "env": {"OMP_NUM_THREADS": "1"},
    }
    client = start_agent(make_plan(tmp_path, [stage], devices=["0", "1"], grace_seconds=60))
    status = client.wait_finished(timeout=90)
    train = client.stage(status, "train")
    assert (train["state"], train["exit_code"]) == ("failed", 1)  # torchrun's: a rank failed
    assert (status["phase"], status["failed_stage"], status["exit_code"]) == ("failed", "train", 1)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
