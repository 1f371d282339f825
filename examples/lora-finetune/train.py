"""LoRA fine-tuning of a tiny Llama with the Hugging Face Trainer, babysat by corral's SDK.

Everything is built here, nothing is downloaded: the model is a 2-layer Llama from a config
(random init, fixed seed), the tokenizer maps bytes to ids, the text is ``data/corpus.txt``.
peft wraps the attention projections with low-rank adapters; only those train.

    python train.py                                  # 60 steps on the CPU
    python train.py --set steps=200 --set lora.r=16  # typed overrides
    python train.py --experiment tiny                # configs/experiments/tiny.py

Stop it with SIGTERM (``kill -TERM <pid>``, or a spot preemption) and it saves a checkpoint and
exits with 75; run the same command again and it continues from that checkpoint.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from corral.errors import BadInput
from corral.sdk import TrainingConfig, load_config, preflight, retention_policy

# Before transformers is imported (in main): never reach the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent

#: Checkpoints kept when the script runs without corral. Under corral the spec's `checkpoints:`
#: section decides (passed as CORRAL_CHECKPOINT_KEEP_LAST, ...); keep the two equal.
RETENTION = {"keep_last": 2}

#: Settings that fix the base model and the adapters' shapes: a checkpoint made with other
#: values cannot be resumed (the weights would not fit, or belong to another base model).
SHAPE = (
    "seed",
    "model.hidden_size",
    "model.layers",
    "model.heads",
    "lora.r",
    "lora.targets",
    "lora.train_head",
)


@dataclass
class LoraSettings:
    r: int = 8  # adapter rank
    alpha: int = 16  # scaling numerator (scale = alpha / r)
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    train_head: bool = True  # also train the output layer (the base one is random)


@dataclass
class ModelSettings:
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4


@dataclass
class Config(TrainingConfig):
    steps: int = 60  # optimizer steps
    batch_size: int = 8  # sequences per step
    seq_len: int = 64  # bytes per sequence
    lr: float = 3e-3  # peak learning rate
    save_steps: int = 20  # a checkpoint every N steps (and one on SIGTERM)
    seed: int = 0  # base-model init and data order
    threads: int = 2  # torch CPU threads
    data: str = "data/corpus.txt"  # text file, relative to this folder
    output_dir: str = "out"  # adapter + checkpoints (when CORRAL_CHECKPOINT_DIR is unset)
    model: ModelSettings = field(default_factory=ModelSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)


class ByteTokenizer:
    """Bytes are tokens 0-255; 256 is padding, 257 begins and 258 ends a text."""

    pad_id, bos_id, eos_id = 256, 257, 258
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return [self.bos_id, *text.encode("utf-8"), self.eos_id]

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def make_dataset(text: str, tokenizer: ByteTokenizer, seq_len: int):
    import torch

    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    starts = range(0, max(len(ids) - seq_len, 1), seq_len // 2)

    class Chunks(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(starts)

        def __getitem__(self, i: int) -> dict:
            chunk = ids[starts[i] : starts[i] + seq_len]
            return {"input_ids": chunk, "labels": chunk.clone()}

    return Chunks()


def build_model(cfg: Config, vocab_size: int):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(cfg.seed)  # the same base weights in every attempt
    base = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=cfg.model.hidden_size,
            intermediate_size=cfg.model.hidden_size * 2,
            num_hidden_layers=cfg.model.layers,
            num_attention_heads=cfg.model.heads,
            num_key_value_heads=cfg.model.heads,
            max_position_embeddings=cfg.seq_len,
            pad_token_id=ByteTokenizer.pad_id,
            bos_token_id=ByteTokenizer.bos_id,
            eos_token_id=ByteTokenizer.eos_id,
        )
    )
    adapters = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.targets,
        modules_to_save=["lm_head"] if cfg.lora.train_head else None,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base, adapters)


def _setting(config: dict, dotted: str) -> object:
    value: object = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_resumable(checkpoint: str | None, cfg: Config, ckpt_dir: Path) -> int:
    """The step ``checkpoint`` holds (0 without one). A checkpoint of another base model or
    adapter shape (``python train.py``, then ``--set lora.r=16`` in the same folder) is a clear
    error, not a size-mismatch traceback from deep inside the Trainer."""
    import dataclasses
    import json

    if checkpoint is None:
        return 0
    folder = Path(checkpoint)
    try:
        saved = json.loads((folder / "corral_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None  # written by something else: let the Trainer try
    if isinstance(saved, dict):
        now = dataclasses.asdict(cfg)
        diff = [
            f"{key}={_setting(saved, key)} (now {_setting(now, key)})"
            for key in SHAPE
            if _setting(saved, key) is not None and _setting(saved, key) != _setting(now, key)
        ]
        if diff:
            under_corral = os.environ.get("CORRAL_CHECKPOINT_DIR")
            where = "CORRAL_CHECKPOINT_DIR" if under_corral else "--set output_dir=..."
            raise BadInput(
                f"{checkpoint} was made with another model: {', '.join(diff)}; use the same "
                f"settings, or another checkpoint folder ({where}), or delete {ckpt_dir}"
            )
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    return int(state.get("global_step") or 0)


def load_finished(model, checkpoint: str) -> float | None:
    """Load the adapters of a checkpoint that already reached the last step, instead of
    resuming from it (the Trainer would run one more step); its last logged loss."""
    import json

    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(Path(checkpoint) / "adapter_model.safetensors"))
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    losses = [e["loss"] for e in state.get("log_history") or [] if "loss" in e]
    return losses[-1] if losses else None


def main(argv: list[str]) -> int:
    cfg = load_config(Config, argv=argv, experiments_dir=HERE / "configs" / "experiments")
    out = Path(cfg.output_dir)
    ckpt_dir = Path(os.environ.get("CORRAL_CHECKPOINT_DIR") or out / "checkpoints")
    data = HERE / cfg.data
    preflight(dataset=data, output_dir=out, checkpoint_dir=ckpt_dir, min_free_gb=0.1)

    import torch
    from transformers import Trainer, TrainingArguments

    from corral.sdk.integrations.hf import CorralCallback, last_complete_checkpoint

    torch.set_num_threads(cfg.threads)
    tokenizer = ByteTokenizer()
    dataset = make_dataset(data.read_text(encoding="utf-8"), tokenizer, cfg.seq_len)
    model = build_model(cfg, tokenizer.vocab_size)
    args = TrainingArguments(
        output_dir=str(ckpt_dir),
        max_steps=cfg.steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(cfg.steps // 10, 1),
        logging_steps=1,
        save_steps=cfg.save_steps,
        save_total_limit=None,  # the callback applies corral's retention
        seed=cfg.seed,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = CorralCallback(**retention_policy(fallback=RETENTION), progress_every_s=5.0)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[callback])

    resume = last_complete_checkpoint(ckpt_dir)
    done = check_resumable(resume, cfg, ckpt_dir)
    if resume and done >= cfg.steps:  # finished already (or preempted right at the end)
        print(f"already trained: {resume}", flush=True)
        steps, loss = done, load_finished(model, resume)
    else:
        print(f"resuming from {resume}" if resume else "starting fresh", flush=True)
        trainer.train(resume_from_checkpoint=resume)
        callback.exit_if_preempted()  # SIGTERM: the checkpoint is saved, exit 75 ("resume me")
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        steps, loss = trainer.state.global_step, (losses[-1] if losses else None)

    model.save_pretrained(out / "adapter")
    shown = f"{loss:.3f}" if loss is not None else "n/a"
    print(f"done: {steps} steps, final loss {shown}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:  # a bad --set, experiment, pre-flight or checkpoint: one line, exit 2
        print(f"lora-finetune: {e}", file=sys.stderr)
        sys.exit(2)
