"""The training loop of docs/sdk.md at awkward moments: a stop at the first step after a resume,
and a SIGTERM that arrives right after a step's preemption check."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

import corral.sdk
from corral.sdk import Checkpointer, signals
from corral.wire.env import EXIT_PREEMPTED

torch = pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def sdk_md_loop() -> str:
    match = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert match is not None
    return match.group(1)


@pytest.fixture
def workspace(sdk_sandbox, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the example's preflight checks wandb
    (sdk_sandbox / "data" / "train").mkdir(parents=True)
    (sdk_sandbox / "data" / "train" / "part-0.txt").write_text("a b\n")
    monkeypatch.setattr(sys, "argv", ["train.py", "--set", "steps=6"])
    return sdk_sandbox


def run_loop(after_step=None) -> dict:
    """Run the sdk.md loop with a tiny model; ``after_step(n)`` runs after the nth train step
    of this attempt (n from 1)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    calls = [0]

    def train_step() -> float:
        loss = model(torch.ones(1, 2)).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        calls[0] += 1
        if after_step is not None:
            after_step(calls[0])
        return loss.item()

    namespace = {
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "train_step": train_step,
        "refs": ["a b"],
        "hyps": ["a c"],
    }
    exec(compile(sdk_md_loop(), "docs/sdk.md", "exec", dont_inherit=True), namespace)
    namespace["ckpt"].close()
    return namespace


def steps_saved(workspace: Path) -> list[int]:
    return [c.step for c in Checkpointer(workspace / "checkpoints").checkpoints()]


def test_a_stop_at_the_first_step_after_a_resume_saves_that_step(workspace):
    def preempt_at_2(n: int) -> None:
        if n == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit) as exited:
        run_loop(preempt_at_2)
    assert exited.value.code == EXIT_PREEMPTED
    assert steps_saved(workspace) == [0, 1]

    signals._reset_for_tests()  # the next attempt is a new process

    def deadline_at_1(n: int) -> None:
        if n == 1:
            signals.request_stop("deadline")

    second = run_loop(deadline_at_1)
    assert (second["start"], second["step"]) == (2, 2)
    assert steps_saved(workspace)[-1] == 2  # step 2 was trained: it must be kept


def test_a_sigterm_right_after_the_preemption_check_still_exits_75(workspace, monkeypatch):
    real = corral.sdk.exit_if_preempted

    def check_then_signal(*args, **kwargs):
        real(*args, **kwargs)
        if kwargs.get("step") == 3:  # the notice lands just after this step's check
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(corral.sdk, "exit_if_preempted", check_then_signal)
    with pytest.raises(SystemExit) as exited:  # exit 0 reads "finished" with 6 steps to go
        run_loop()
    assert exited.value.code == EXIT_PREEMPTED
    assert steps_saved(workspace)[-1] == 4  # the next step's check saved it
