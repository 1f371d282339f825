"""The PyTorch Lightning callback, with the real Trainer and a tiny linear model on CPU: the same
guarantees as the HF callback (checkpoint on preemption, exit 75, progress, resume, budget)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from corral.sdk import Checkpointer, signals  # noqa: E402
from corral.sdk.cost import CostMeter  # noqa: E402
from corral.sdk.integrations.lightning import CorralCallback  # noqa: E402
from corral.wire.env import EXIT_PREEMPTED  # noqa: E402

pytestmark = pytest.mark.torch


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SigtermAt(pl.Callback):
    """Sends this process a SIGTERM at the end of optimizer step ``step`` (a notice)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def loader():
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g),
                                          torch.randn(64, 1, generator=g))  # fmt: skip
    return torch.utils.data.DataLoader(data, batch_size=4)


def fit(callbacks: list, *, max_steps: int, ckpt_path: str | None = None) -> pl.Trainer:
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
    )  # fmt: skip
    trainer.fit(Tiny(), loader(), ckpt_path=ckpt_path)
    return trainer


def fixed_meter(seconds: float, **kwargs) -> CostMeter:
    """A meter at $3.60/h whose clock stands ``seconds`` after its start ($0.001 per second)."""
    now = [0.0]
    meter = CostMeter(hourly_price=3.6, clock=lambda: now[0], **kwargs)
    now[0] = float(seconds)
    return meter


def records(path: Path, kind: str) -> list[dict]:
    out = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in out if r["kind"] == kind]


@pytest.fixture
def progress(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(path))
    return path


def test_checkpoints_progress_cost_and_retention(tmp_path, progress):
    ck = tmp_path / "ck"
    callback = CorralCallback(str(ck), every_n_steps=2, keep_last=2, progress_every_s=0,
                              cost_meter=fixed_meter(10))  # fmt: skip
    trainer = fit([callback], max_steps=6)
    assert trainer.global_step == 6
    assert sorted(os.listdir(ck)) == ["ckpt-4", "ckpt-6"]  # the newest 2, each saved once
    steps = [r for r in records(progress, "progress") if r.get("loss") is not None]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert all(r["total"] == 6 and r["metrics"]["cost_usd"] == pytest.approx(0.01) for r in steps)
    assert [r["step"] for r in records(progress, "checkpoint")] == [2, 4, 6]
    state = Checkpointer(ck).restore()
    assert state["global_step"] == 6 and "optimizer_states" in state
    saved = state["callbacks"]["CorralCallback"]
    assert saved["cost_usd"] == pytest.approx(0.01)
    callback.exit_if_preempted()  # not preempted: returns


def test_sigterm_saves_stops_exits_75_and_the_next_fit_resumes_with_the_cost(tmp_path, progress):
    ck = tmp_path / "ck"
    first = CorralCallback(str(ck), every_n_steps=100, cost_meter=fixed_meter(20))
    trainer = fit([SigtermAt(3), first], max_steps=8)
    assert trainer.global_step == 3 and first.stopped_for == "preempted"
    assert sorted(os.listdir(ck)) == ["ckpt-3"]
    with pytest.raises(SystemExit) as exited:
        first.exit_if_preempted()
    assert exited.value.code == EXIT_PREEMPTED

    signals._reset_for_tests()  # the next attempt is a new process in real life
    second = CorralCallback(str(ck), every_n_steps=100, cost_meter=CostMeter(hourly_price=0))
    resume = second.resume_path()
    assert resume == str(ck / "ckpt-3")
    trainer = fit([second], max_steps=8, ckpt_path=resume)
    assert trainer.global_step == 8
    assert second.cost_meter.cost_usd() == pytest.approx(0.02)  # carried in the checkpoint
    assert sorted(os.listdir(ck)) == ["ckpt-3", "ckpt-8"]  # saved at the end of training
    assert Checkpointer(ck).restore()["global_step"] == 8


def test_a_notice_before_fit_is_kept_and_handled_at_the_first_step(tmp_path, progress):
    ck = tmp_path / "ck"
    callback = CorralCallback(str(ck))
    os.kill(os.getpid(), signal.SIGTERM)  # while the model loads: only the flag
    trainer = fit([callback], max_steps=8)
    assert trainer.global_step == 1 and callback.stopped_for == "preempted"
    assert sorted(os.listdir(ck)) == ["ckpt-1"]


def test_preemption_without_grace_left_stops_without_a_new_checkpoint(
    tmp_path, progress, monkeypatch, capsys
):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "0")
    ck = tmp_path / "ck"
    callback = CorralCallback(str(ck), every_n_steps=2)
    trainer = fit([SigtermAt(3), callback], max_steps=8)
    assert trainer.global_step == 3 and callback.preempted_without_save
    assert sorted(os.listdir(ck)) == ["ckpt-2"]  # the periodic one only, nothing torn
    assert "not enough for a save" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        callback.exit_if_preempted()
    assert exited.value.code == EXIT_PREEMPTED


def test_budget_stop_saves_and_stops_and_a_later_fit_trains_once_the_budget_allows(
    tmp_path, progress
):
    ck = tmp_path / "ck"
    callback = CorralCallback(str(ck), cost_meter=fixed_meter(10, budget_usd=0.005))
    with pytest.warns(UserWarning, match="budget"):
        trainer = fit([callback], max_steps=5)
    assert trainer.global_step == 1 and callback.stopped_for == "budget"
    assert sorted(os.listdir(ck)) == ["ckpt-1"]
    callback.exit_if_preempted()  # a budget stop is not a preemption: returns

    callback.cost_meter.budget_usd = 1.0
    trainer = fit([callback], max_steps=5, ckpt_path=callback.resume_path())
    assert trainer.global_step == 5 and callback.stopped_for is None


def test_lightning_ending_fit_on_its_own_sigterm_path_exits_75_not_0():
    """Lightning raises SIGTERMException (a SystemExit without a code: exit 0) when its own
    handler saw the signal; the callback turns that into 'resume me'."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    callback = CorralCallback(install_signals=False)
    exc = SIGTERMException()
    callback.on_exception(None, None, exc)  # type: ignore[arg-type]
    assert exc.code is None  # no preemption signal here: left alone
    signals._on_signal(signal.SIGTERM, None)
    callback.on_exception(None, None, exc)  # type: ignore[arg-type]
    assert exc.code == EXIT_PREEMPTED


SCRIPT = r"""
import os, sys, time
import torch
import lightning.pytorch as pl
sys.path.insert(0, os.path.dirname(__file__))
from corral.sdk.integrations.lightning import CorralCallback
from lightning_model import Tiny, loader

class Slow(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 3:
            print("ready", flush=True)
        time.sleep(0.05)

callback = CorralCallback(every_n_steps=1000)
resume = callback.resume_path()
print(f"resuming from {resume}", flush=True)
trainer = pl.Trainer(max_steps=40, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[Slow(), callback])
trainer.fit(Tiny(), loader(), ckpt_path=resume)
print(f"stopped at {trainer.global_step}", flush=True)
callback.exit_if_preempted()
"""


@pytest.mark.slow
def test_a_real_sigterm_exits_75_and_the_rerun_resumes_and_finishes(tmp_path):
    """As under corral: the agent SIGTERMs the training process; it saves and exits 75, and
    the next attempt (the same script) resumes from that checkpoint and finishes (exit 0)."""
    here = Path(__file__).resolve()
    (tmp_path / "lightning_model.py").write_text(
        "import torch\nimport lightning.pytorch as pl\n"
        + _source(Tiny) + "\n\n" + _source(loader) + "\n"
    )  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "CORRAL_CHECKPOINT_DIR": str(tmp_path / "ck"),
           "CORRAL_PROGRESS_FILE": str(tmp_path / "progress.jsonl"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(here.parents[2] / "src")}  # fmt: skip
    out = tmp_path / "first.out"
    with out.open("w") as f:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=f,
                                stderr=subprocess.STDOUT, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        while "ready" not in out.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_PREEMPTED, out.read_text()
    first = out.read_text()
    stopped = int(first.split("stopped at ")[1].split()[0])
    assert 3 <= stopped < 40
    assert os.listdir(tmp_path / "ck") == [f"ckpt-{stopped}"]

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming from {tmp_path / 'ck' / f'ckpt-{stopped}'}" in done.stdout
    assert "stopped at 40" in done.stdout
    steps = [r["step"] for r in records(tmp_path / "progress.jsonl", "progress")]
    # each run reports its first step at once: the second one's is the step after the save
    assert steps[-1] == 40 and steps[steps.index(stopped + 1) - 1] <= stopped


def _source(obj) -> str:
    import inspect
    import textwrap

    return textwrap.dedent(inspect.getsource(obj))


DDP_SCRIPT = r"""
import os, sys, time
import torch
import lightning.pytorch as pl
sys.path.insert(0, os.path.dirname(__file__))
from corral.sdk.integrations.lightning import CorralCallback
from lightning_model import Tiny, loader

class Slow(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 3 and trainer.global_rank == 1:
            print("ready", flush=True)
        time.sleep(0.05)

callback = CorralCallback(sys.argv[1], every_n_steps=1000)
trainer = pl.Trainer(max_steps=400, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=[Slow(), callback])
trainer.fit(Tiny(), loader(), ckpt_path=callback.resume_path())
print(f"stopped at {trainer.global_step}", flush=True)
callback.exit_if_preempted()
"""


@pytest.mark.slow
def test_ddp_a_sigterm_to_one_rank_stops_both_at_one_step_with_one_checkpoint(tmp_path):
    """Two DDP ranks (gloo on loopback, started as torchrun would): the ranks agree, rank 0
    writes the checkpoint, both exit 75 at the same step."""
    from .gloo_parts import free_port, rank_env

    (tmp_path / "lightning_model.py").write_text(
        "import torch\nimport lightning.pytorch as pl\n"
        + _source(Tiny) + "\n\n" + _source(loader) + "\n"
    )  # fmt: skip
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    port, ck = free_port(), tmp_path / "ck"
    outs = [tmp_path / f"rank{r}.out" for r in (0, 1)]
    procs = []
    for rank in (0, 1):
        env = rank_env(rank, port, NODE_RANK="0",
                       PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))  # fmt: skip
        with outs[rank].open("w") as f:
            procs.append(subprocess.Popen([sys.executable, str(script), str(ck)], stdout=f,
                                          stderr=subprocess.STDOUT, env=env))  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while "ready" not in outs[1].read_text():
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [
                o.read_text()[-3000:] for o in outs
            ]
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGTERM)  # rank 1 only
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    texts = [o.read_text() for o in outs]
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], [t[-3000:] for t in texts]
    steps = {int(t.split("stopped at ")[1].split()[0]) for t in texts}
    assert len(steps) == 1 and 3 <= min(steps) < 400
    assert os.listdir(ck) == [f"ckpt-{steps.pop()}"]
    assert Checkpointer(ck).latest().world_size == 1  # DDP: one writer, the whole state
