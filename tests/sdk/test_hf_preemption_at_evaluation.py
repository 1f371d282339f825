"""The HF Trainer callback at awkward moments (the real Trainer, a tiny Llama on CPU, real
signals)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from corral.sdk import signals  # noqa: E402
from corral.sdk.cost import CostMeter  # noqa: E402
from corral.sdk.integrations.hf import CorralCallback  # noqa: E402

from .hf_parts import SigtermAt, TinyData  # noqa: E402


class Watch(transformers.TrainerCallback):
    """Records the grace time left at each evaluation and save."""

    def __init__(self):
        self.events: list[tuple[str, int, float | None]] = []

    def on_evaluate(self, args, state, control, **kwargs):
        self.events.append(("evaluate", state.global_step, signals.seconds_left()))

    def on_save(self, args, state, control, **kwargs):
        self.events.append(("save", state.global_step, signals.seconds_left()))


def make_trainer(out: Path, callbacks: list, **kwargs):
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
    eval_dataset = kwargs.pop("eval_dataset", None)
    args = transformers.TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        **kwargs,
    )
    return transformers.Trainer(
        model=transformers.LlamaForCausalLM(config),
        args=args,
        train_dataset=TinyData(),
        eval_dataset=eval_dataset,
        callbacks=callbacks,
    )


@pytest.fixture(autouse=True)
def progress(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(path))
    return path


def test_a_preemption_at_an_evaluation_step_saves_before_the_grace_runs_out(tmp_path, monkeypatch):
    # The evaluation takes ~2.4 s, the grace period is 2 s: evaluating first would leave the
    # agent's SIGKILL to land before the save.
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "2")
    out = tmp_path / "out"
    watch = Watch()
    callback = CorralCallback(cost_meter=CostMeter(hourly_price=0))
    trainer = make_trainer(
        out,
        [SigtermAt(2), callback, watch],
        max_steps=6,
        save_steps=100,
        eval_strategy="steps",
        eval_steps=2,
        eval_dataset=TinyData(n=8, delay=0.3),
    )
    trainer.train()
    assert callback.stopped_for == "preempted" and trainer.state.global_step == 2
    saves = [e for e in watch.events if e[0] == "save"]
    assert [s[1] for s in saves] == [2]
    assert saves[0][2] > 0, watch.events  # saved within the grace period
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
