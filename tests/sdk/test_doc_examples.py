"""The training-loop examples of docs/sdk.md and docs/sdk-checkpoints.md run as written, with
small stand-ins for the user's model and data: through a preemption and a resume."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from corral.sdk import signals
from corral.wire.env import EXIT_PREEMPTED

torch = pytest.importorskip("torch")

DOCS = Path(__file__).resolve().parents[2] / "docs"


def first_python_block(doc: str) -> str:
    match = re.search(r"```python\n(.*?)```", (DOCS / doc).read_text(), re.S)
    assert match is not None, f"no python example in {doc}"
    return match.group(1)


def model_parts() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def one_step(parts: dict) -> float:
    loss = parts["model"](torch.ones(1, 2)).pow(2).sum()
    parts["optimizer"].zero_grad()
    loss.backward()
    parts["optimizer"].step()
    parts["scheduler"].step()
    return loss.item()


def sigterm_after(calls: int):
    """A stand-in that sends this process SIGTERM (a preemption notice) on its nth call."""
    count = [0]

    def hook() -> None:
        count[0] += 1
        if count[0] == calls:
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def run_sdk_md_loop(preempt_at: int | None, monkeypatch) -> dict:
    parts = model_parts()
    hook = sigterm_after(preempt_at) if preempt_at else (lambda: None)
    steps = []

    def train_step() -> float:
        loss = one_step(parts)
        steps.append(len(steps))
        hook()
        return loss

    namespace = {**parts, "train_step": train_step, "refs": ["a b"], "hyps": ["a c"]}
    monkeypatch.setattr(sys, "argv", ["train.py", "--set", "steps=4"])
    code = compile(first_python_block("sdk.md"), "docs/sdk.md", "exec", dont_inherit=True)
    exec(code, namespace)
    return namespace


def test_the_sdk_md_loop_resumes_after_a_preemption(sdk_sandbox, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # its preflight checks a wandb tracker
    (sdk_sandbox / "data" / "train").mkdir(parents=True)  # ... and the dataset
    (sdk_sandbox / "data" / "train" / "part-0.txt").write_text("a b\n")
    with pytest.raises(SystemExit) as exit_info:
        run_sdk_md_loop(preempt_at=2, monkeypatch=monkeypatch)
    assert exit_info.value.code == EXIT_PREEMPTED
    assert sorted(p.name for p in (sdk_sandbox / "checkpoints").iterdir()) == ["ckpt-0", "ckpt-1"]

    signals._reset_for_tests()  # the next attempt is a new process in real life
    namespace = run_sdk_md_loop(preempt_at=None, monkeypatch=monkeypatch)
    assert namespace["start"] == 2  # resumed after the preemption checkpoint of step 1
    assert namespace["step"] == 3
    namespace["ckpt"].close()


def run_checkpoints_md_example(total_steps: int, evaluate=None) -> dict:
    parts = model_parts()

    class Sampler:
        position = 0

        def state_dict(self) -> dict:
            return {"position": self.position}

        def load_state_dict(self, state: dict) -> None:
            self.position = state["position"]

    sampler = Sampler()

    def train_one_step(model, opt, sched, sampler) -> None:
        one_step(parts)
        sampler.position += 1

    namespace = {
        "build_model": lambda: parts["model"],
        "build_optimizer": lambda: parts["optimizer"],
        "build_scheduler": lambda opt: parts["scheduler"],
        "build_sampler": lambda: sampler,
        "train_one_step": train_one_step,
        "evaluate": evaluate or (lambda: 0.5),
        "total_steps": total_steps,
    }
    block = first_python_block("sdk-checkpoints.md")
    exec(compile(block, "docs/sdk-checkpoints.md", "exec", dont_inherit=True), namespace)
    return namespace


def manifests(directory: Path) -> dict[str, bytes]:
    return {p.name: (p / "COMPLETE").read_bytes() for p in sorted(directory.iterdir())}


def test_the_checkpoints_md_example_saves_its_last_step_once(sdk_sandbox):
    first = run_checkpoints_md_example(total_steps=3)
    first["ckpt"].close()
    ckpts = sdk_sandbox / "checkpoints"
    before = manifests(ckpts)
    assert list(before) == ["ckpt-3"]  # no evaluation step yet: the trailing save

    again = run_checkpoints_md_example(total_steps=3)  # resumed at the end: zero iterations
    again["ckpt"].close()
    assert again["start"] == 3 and again["sampler"].position == 3
    assert manifests(ckpts) == before  # step 3 not saved a second time

    more = run_checkpoints_md_example(total_steps=5)
    more["ckpt"].close()
    assert list(manifests(ckpts)) == ["ckpt-3", "ckpt-5"]


def test_a_sigterm_during_the_checkpoints_md_evaluation_still_exits_75(sdk_sandbox):
    """The notice lands while evaluate() runs: the loop must not end as a budget stop (exit 0,
    "finished") but reach the next step's check, save and exit 75."""

    def evaluate_then_signal() -> float:
        os.kill(os.getpid(), signal.SIGTERM)
        return 0.5

    with pytest.raises(SystemExit) as exited:
        run_checkpoints_md_example(total_steps=600, evaluate=evaluate_then_signal)
    assert exited.value.code == EXIT_PREEMPTED
    assert "ckpt-501" in manifests(sdk_sandbox / "checkpoints")
