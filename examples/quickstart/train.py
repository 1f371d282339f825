"""Train a small character-level GPT on Python's own help text, on the CPU.

    python train.py                       # defaults (about a minute on 2 cores)
    QUICKSTART_STEPS=20 python train.py   # any config field as QUICKSTART_<FIELD>
    python train.py --set steps=20 --set lr=3e-4

Resumes from the newest good checkpoint in ``$CORRAL_CHECKPOINT_DIR`` (default
``./checkpoints``), so a preempted or restarted run continues where it stopped. Writes the final
model to ``<out_dir>/model/``.
"""

from __future__ import annotations

print("quickstart: loading corpus", flush=True)  # first line before the slow imports

import dataclasses  # noqa: E402
import difflib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from corral.errors import BadInput  # noqa: E402
from corral.sdk import (  # noqa: E402
    Checkpointer,
    CostMeter,
    TrainingConfig,
    exit_if_preempted,
    install_signal_handlers,
    load_config,
    report,
    restore_training_state,
    retention_policy,
    should_stop,
    training_state,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import (  # noqa: E402
    GPT,
    GPTConfig,
    Vocab,
    estimate_loss,
    get_batch,
    load_corpus,
    lr_at,
    save_model,
    split_corpus,
)

ENV_PREFIX = "QUICKSTART_"
#: Config fields that fix the model's shape: a checkpoint made with other values cannot load.
ARCHITECTURE = ("block_size", "n_layer", "n_head", "n_embd")


@dataclass
class Config(TrainingConfig):
    steps: int = 600  # optimizer steps in total
    batch_size: int = 32  # sequences per step
    block_size: int = 64  # context length, characters
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # embedding width
    dropout: float = 0.0
    lr: float = 1e-3  # peak learning rate
    min_lr: float = 1e-4  # learning rate at the end of the cosine decay
    warmup_steps: int = 50  # steps of linear warmup
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # max global gradient norm
    eval_every: int = 100  # steps between val-loss evaluations (each one saves a checkpoint)
    eval_batches: int = 20  # batches per val-loss estimate
    log_every: int = 10  # steps between progress reports
    seed: int = 1337
    threads: int = 2  # torch intra-op threads
    out_dir: str = "out"  # the final model goes to <out_dir>/model/


@dataclass(frozen=True)
class Retention:
    """Checkpoints kept when the script runs without corral. Under corral the spec's
    ``checkpoints:`` section decides (the agent passes it as ``CORRAL_CHECKPOINT_KEEP_LAST``,
    ``_KEEP_BEST``, ``_METRIC``, ``_MODE``, which also work on a direct run); keep these equal
    to the spec's so both behave the same."""

    keep_last: int = 2  # the newest N ...
    keep_best: int = 1  # ... plus the best N by metric
    metric: str = "val_loss"
    mode: str = "min"


def env_overrides(cls: type[Config], environ: dict[str, str]) -> dict[str, str]:
    """``QUICKSTART_<FIELD>`` variables as config overrides (``--set`` still wins); a variable
    with this prefix that names no field is an error, so a typo is not silently ignored."""
    fields = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name not in fields:
            known = [ENV_PREFIX + f.upper() for f in fields]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise BadInput(f"unknown setting {key}{hint}")
        out[name] = value
    return out


def batch_for_step(data: torch.Tensor, cfg: Config, step: int) -> tuple[torch.Tensor, ...]:
    """The batch of ``step`` depends only on the seed and the step, so a resumed run sees
    exactly the batches an uninterrupted one would (the data position is the step)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    return get_batch(data, cfg.batch_size, cfg.block_size, gen)


def check_architecture(saved: dict | None, cfg: Config, where: str) -> None:
    """Exit with a clear message when the checkpoint's model shape differs from ``cfg``."""
    if not saved:
        return
    diff = [
        f"{k}={saved[k]} (now {getattr(cfg, k)})"
        for k in ARCHITECTURE
        if k in saved and saved[k] != getattr(cfg, k)
    ]
    if diff:
        raise SystemExit(
            f"quickstart: the checkpoint in {where} has another model shape: {', '.join(diff)}; "
            "use the same settings or another CORRAL_CHECKPOINT_DIR"
        )


def build(cfg: Config, vocab_size: int) -> tuple[GPT, torch.optim.Optimizer]:
    gpt = GPTConfig(
        vocab_size=vocab_size,
        block_size=cfg.block_size,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        dropout=cfg.dropout,
    )
    model = GPT(gpt)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    return model, optimizer


def main(argv: list[str]) -> int:
    cfg = load_config(Config, overrides=env_overrides(Config, dict(os.environ)), argv=argv)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)

    text = load_corpus()
    vocab = Vocab.from_text(text)
    train_data, val_data = split_corpus(text, vocab)
    print(
        f"quickstart: {len(text):,} chars, vocab {vocab.size}, "
        f"{len(train_data):,} train / {len(val_data):,} val",
        flush=True,
    )
    model, optimizer = build(cfg, vocab.size)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"quickstart: model {n_params / 1e6:.2f}M parameters", flush=True)

    # Retention: the spec's `checkpoints:` under corral, else this script's own choice.
    checkpointer = Checkpointer(**retention_policy(fallback=dataclasses.asdict(Retention())))
    meter = CostMeter()
    install_signal_handlers()

    # Resume: the newest good checkpoint (corrupt or incomplete ones are skipped).
    step, best_val, elapsed_before = 0, float("inf"), 0.0
    saved_step = None  # the step of the newest checkpoint this run has (saved or resumed)
    state = checkpointer.restore()
    if state is not None:
        check_architecture(state.get("config"), cfg, checkpointer.dir)
        info = restore_training_state(state, model, optimizer)
        step = saved_step = int(info["step"])
        best_val = info["best_metric"] if info["best_metric"] is not None else best_val
        elapsed_before = info["elapsed_s"] or 0.0
        if info["cost_usd"] is not None:
            meter.load_state_dict({"cost_usd": info["cost_usd"]})
        print(f"quickstart: resumed from step {step} ({checkpointer.dir})", flush=True)
    del state

    started = time.monotonic()

    def state_now() -> dict:
        return training_state(
            model,
            optimizer,
            step=step,
            data_position=step,
            cost_usd=meter,
            elapsed_s=elapsed_before + time.monotonic() - started,
            best_metric=best_val,
            config=cfg,
        )

    model.train()
    while step < cfg.steps and not should_stop():
        lr = lr_at(step, lr=cfg.lr, min_lr=cfg.min_lr, warmup=cfg.warmup_steps, total=cfg.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch_for_step(train_data, cfg, step)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        step += 1

        metrics: dict[str, float] = {}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            metrics["val_loss"] = estimate_loss(model, val_data, cfg.batch_size, cfg.eval_batches)
            best_val = min(best_val, metrics["val_loss"])
            checkpointer.save(state_now(), step, metrics=metrics)
            saved_step = step
            print(
                f"step {step}/{cfg.steps} loss {loss.item():.4f} "
                f"val_loss {metrics['val_loss']:.4f} lr {lr:.2e} "
                f"({elapsed_before + time.monotonic() - started:.1f}s)",
                flush=True,
            )
        if metrics or step % cfg.log_every == 0:
            report(
                step=step, total=cfg.steps, loss=loss.item(), lr=lr, **metrics, **meter.as_metrics()
            )
        meter.check(step)
        exit_if_preempted(checkpointer, state_now, step)

    if saved_step != step and step > 0:
        checkpointer.save(state_now(), step)  # stopped early (budget): keep what was done
    checkpointer.close()  # waits until the last checkpoint is durable
    if step < cfg.steps:
        print(f"quickstart: stopped early at step {step}/{cfg.steps}", flush=True)

    weights = save_model(model, vocab, Path(cfg.out_dir) / "model")
    print(
        f"quickstart: done at step {step}, best val_loss {best_val:.4f}, model in {weights}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:  # a bad --set or QUICKSTART_* setting: one clear line, exit 2
        print(f"quickstart: {e}", file=sys.stderr)
        sys.exit(2)
