"""The Hugging Face Trainer callback, with the real Trainer and a tiny Llama on CPU."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from corral.sdk import signals  # noqa: E402
from corral.sdk.cost import CostMeter  # noqa: E402
from corral.sdk.integrations.hf import (  # noqa: E402
    STATE_FILE,
    CorralCallback,
    last_complete_checkpoint,
)
from corral.wire.env import EXIT_PREEMPTED  # noqa: E402

from .hf_parts import SigtermAt, TinyData  # noqa: E402


def make_trainer(out: Path, callbacks: list, *, max_steps: int, save_steps: int = 100):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        save_steps=save_steps,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    model = transformers.LlamaForCausalLM(config)
    return transformers.Trainer(
        model=model, args=args, train_dataset=TinyData(), callbacks=callbacks
    )


def records(path: Path, kind: str) -> list[dict]:
    out = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in out if r["kind"] == kind]


def fixed_meter(seconds: float, **kwargs) -> CostMeter:
    """A meter at $3.60/h whose clock stands ``seconds`` after its start: it shows
    ``seconds`` x $0.001 for the whole test."""
    now = [0.0]
    meter = CostMeter(hourly_price=3.6, clock=lambda: now[0], **kwargs)
    now[0] = float(seconds)
    return meter


@pytest.fixture
def progress(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(path))
    return path


def test_reports_progress_and_cost_and_keeps_the_newest_checkpoints(tmp_path, progress):
    out = tmp_path / "out"
    callback = CorralCallback(keep_last=2, cost_meter=fixed_meter(10), progress_every_s=0)
    make_trainer(out, [callback], max_steps=5, save_steps=1).train()

    steps = [r for r in records(progress, "progress") if r.get("loss") is not None]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(r["total"] == 5 and r["metrics"]["cost_usd"] == pytest.approx(0.01) for r in steps)
    assert [r["step"] for r in records(progress, "checkpoint")] == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4", "checkpoint-5"]
    saved = json.loads((out / "checkpoint-5" / STATE_FILE).read_text())
    assert saved["cost_usd"] == pytest.approx(0.01)
    assert callback.save_seconds is not None and callback.stopped_for is None
    callback.exit_if_preempted()  # not preempted: returns


def test_sigterm_saves_stops_exits_75_and_the_rerun_resumes_from_that_step(tmp_path, progress):
    out = tmp_path / "out"
    first = CorralCallback(cost_meter=fixed_meter(20))
    trainer = make_trainer(out, [SigtermAt(2), first], max_steps=5)
    trainer.train()
    assert trainer.state.global_step == 2
    assert first.stopped_for == "preempted"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]
    with pytest.raises(SystemExit) as exit_info:
        first.exit_if_preempted()
    assert exit_info.value.code == EXIT_PREEMPTED

    signals._reset_for_tests()  # the next attempt is a new process in real life
    resume_from = last_complete_checkpoint(out)
    assert resume_from == str(out / "checkpoint-2")
    second = CorralCallback(cost_meter=CostMeter(hourly_price=0))
    trainer = make_trainer(out, [second], max_steps=5)
    trainer.train(resume_from_checkpoint=resume_from)
    assert trainer.state.global_step == 5
    trained = [e["step"] for e in trainer.state.log_history if "loss" in e]
    assert trained == [1, 2, 3, 4, 5]  # 1-2 from the checkpoint, 3-5 trained now
    after = [r for r in records(progress, "progress") if r.get("loss") is not None]
    assert [r["step"] for r in after] == [1, 2, 3, 4, 5]
    assert after[-1]["metrics"]["cost_usd"] == pytest.approx(0.02)  # carried from checkpoint


def test_preemption_without_grace_left_stops_without_a_torn_checkpoint(
    tmp_path, progress, monkeypatch, capsys
):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "0")
    out = tmp_path / "out"
    callback = CorralCallback()
    trainer = make_trainer(out, [SigtermAt(2), callback], max_steps=5)
    trainer.train()
    assert trainer.state.global_step == 2
    assert callback.preempted_without_save
    assert not out.exists() or not any(out.iterdir())
    assert "not enough for a save" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        callback.exit_if_preempted()
    assert exit_info.value.code == EXIT_PREEMPTED


def test_budget_stop_saves_and_stops_without_exiting(tmp_path, progress):
    out = tmp_path / "out"
    callback = CorralCallback(cost_meter=fixed_meter(10, budget_usd=0.005))
    trainer = make_trainer(out, [callback], max_steps=5)
    with pytest.warns(UserWarning, match="budget"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert callback.stopped_for == "budget"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-1"]
    callback.exit_if_preempted()  # a budget stop is not a preemption


@pytest.mark.parametrize("content", ["null", "[1, 2]", '{"other": 1}', '{"cost_usd": "x"}', "{"])
def test_resume_with_an_unusable_corral_state_file_warns_and_starts_from_the_offset(
    tmp_path, progress, content, caplog
):
    from types import SimpleNamespace

    ckpt = tmp_path / "checkpoint-7"
    ckpt.mkdir()
    (ckpt / "corral_state.json").write_text(content)
    meter = fixed_meter(0, offset_usd=1.5)
    callback = CorralCallback(cost_meter=meter, install_signals=False)
    args = SimpleNamespace(output_dir=str(tmp_path))
    control = object()
    with caplog.at_level("WARNING"):
        out = callback.on_train_begin(args, SimpleNamespace(global_step=7), control)
    assert out is control
    assert meter.cost_usd() == pytest.approx(1.5)
    assert "no corral state in" in caplog.text


def test_a_notice_before_training_starts_is_kept_not_fatal(monkeypatch):
    """The callback exists while the model loads and the Trainer is built: a SIGTERM then only
    sets the flag (it used to kill the process with -15, no checkpoint, no exit 75)."""
    from corral.sdk import preempted

    CorralCallback()
    os.kill(os.getpid(), signal.SIGTERM)
    assert preempted()


def test_a_bad_price_in_the_environment_fails_when_the_callback_is_made(monkeypatch):
    from corral.errors import BadInput

    monkeypatch.setenv("CORRAL_HOURLY_PRICE", "two dollars")
    with pytest.raises(BadInput, match="CORRAL_HOURLY_PRICE"):
        CorralCallback()


def test_the_cost_carries_over_a_resume_from_a_checkpoint_outside_output_dir(tmp_path, progress):
    import shutil

    first = CorralCallback(cost_meter=fixed_meter(20))
    make_trainer(tmp_path / "out", [SigtermAt(2), first], max_steps=5).train()
    saved = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())
    assert saved["stateful_callbacks"]["corral"]["cost_usd"] == pytest.approx(0.02)
    elsewhere = tmp_path / "archive" / "the-run-at-step-2"
    shutil.copytree(tmp_path / "out" / "checkpoint-2", elsewhere)
    (elsewhere / STATE_FILE).unlink()  # only trainer_state.json carries it
    signals._reset_for_tests()

    second = CorralCallback(cost_meter=CostMeter(hourly_price=0))
    trainer = make_trainer(tmp_path / "new-out", [second], max_steps=4)
    trainer.train(resume_from_checkpoint=str(elsewhere))
    assert trainer.state.global_step == 4
    assert second.cost_meter.cost_usd() == pytest.approx(0.02)
    last = [r for r in records(progress, "progress") if r.get("loss") is not None][-1]
    assert last["step"] == 4 and last["metrics"]["cost_usd"] == pytest.approx(0.02)


def test_a_second_train_after_a_budget_stop_trains_when_the_budget_allows(tmp_path, progress):
    callback = CorralCallback(cost_meter=fixed_meter(10, budget_usd=0.005))
    trainer = make_trainer(tmp_path / "out", [callback], max_steps=5)
    with pytest.warns(UserWarning, match="budget"):
        trainer.train()
    assert trainer.state.global_step == 1 and callback.stopped_for == "budget"

    trainer.train()  # the budget is still used up: it stops again at its first step
    assert trainer.state.global_step == 1 and callback.stopped_for == "budget"

    callback.cost_meter.budget_usd = 1.0  # raised: the last run's stop request is gone
    trainer.train()
    assert trainer.state.global_step == 5
    assert callback.stopped_for is None and not signals.should_stop()
