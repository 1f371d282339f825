"""Recipe: a two-rank ``torchrun`` script (gloo on CPU) that ignores SIGTERM and saves on SIGUSR1,
run with the single `run:` form on two (declared) GPUs on the local provider, preempted by hand
twice and resumed each time at the saved step + 1. (The ``accelerate launch`` recipe runs on the
fake cloud, whose machines share no file with the controller: the code is shipped, the
checkpoints live on the run's volume; the launcher's part is the agent's either way.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import launched

pytest.importorskip("torch.distributed")

TRAIN = """
import json, os, pathlib, signal, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpts = pathlib.Path(os.environ["CORRAL_CHECKPOINT_DIR"])
mine = ckpts / f"ckpt-{rank}.txt"
step = int(mine.read_text()) if mine.exists() else 0
log = ckpts / f"steps-{rank}.txt"
with log.open("a") as f:
    f.write(f"attempt {os.environ['CORRAL_ATTEMPT']} starts at {step + 1} "
            f"world {os.environ['WORLD_SIZE']} port {os.environ['MASTER_PORT']}\\n")
def save(*_):
    tmp = mine.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(mine)
    with (ckpts / f"saves-{rank}.txt").open("a") as f:
        f.write(f"{step}\\n")
signal.signal(signal.SIGUSR1, save)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.barrier()
(ckpts / f"up-{rank}-a{os.environ['CORRAL_ATTEMPT']}").write_text(str(os.getpid()))
if os.environ["CORRAL_ATTEMPT"] == "3":
    sys.exit(0)  # the attempt after the second preemption has little left to do
while True:
    step += 1
    time.sleep(0.01)
"""

SPEC = """
name: ranks
resources: {gpus: "L40S:2", providers: [{provider}]}
run: torchrun train.py
env: {OMP_NUM_THREADS: 1}
save_signal: SIGUSR1
stop_grace: 4s
"""


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["local"])
def test_a_torchrun_job_that_ignores_sigterm_saves_on_usr1_and_resumes(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, ckpts = launched.launch(provider, tmp_path, monkeypatch, SPEC, {"train.py": TRAIN})
    run = launched.preempt_twice(
        run_id, lambda n: all((ckpts / f"up-{r}-a{n}").exists() for r in (0, 1))
    )
    launched.assert_preempted_twice_then_succeeded(run_id, run)
    for rank in (0, 1):
        saves = [int(x) for x in (ckpts / f"saves-{rank}.txt").read_text().split()]
        starts = (ckpts / f"steps-{rank}.txt").read_text().splitlines()
        assert len(saves) == 2 and 0 < saves[0] < saves[1], saves
        assert starts[0].startswith("attempt 1 starts at 1 world 2 port ")
        assert starts[1].startswith(f"attempt 2 starts at {saves[0] + 1} world 2 port ")
        assert starts[2].startswith(f"attempt 3 starts at {saves[1] + 1} world 2 port ")
        assert len(starts) == 3
        assert not starts[0].endswith(" port 29500")


@pytest.mark.slow
def test_a_torchrun_job_stopped_with_corral_stop_says_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``corral stop``: the stage and the attempt say stopped (the stage's code 75, "stopped,
    resumable"), whatever torchrun itself exited with."""
    run_id, ckpts = launched.launch("local", tmp_path, monkeypatch, SPEC, {"train.py": TRAIN})
    launched.stop_and_assert_stopped(
        run_id, lambda: all((ckpts / f"up-{r}-a1").exists() for r in (0, 1))
    )
    for rank in (0, 1):  # each rank saved on the save signal before the stop
        assert len((ckpts / f"saves-{rank}.txt").read_text().split()) == 1
