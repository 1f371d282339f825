"""Evaluate the quickstart model and write ``out/eval_report.json``.

    python evaluate.py                      # the final model in out/model/
    python evaluate.py --from-checkpoint    # the best checkpoint by val_loss instead

Without ``out/model/`` the best checkpoint in ``$CORRAL_CHECKPOINT_DIR`` (default
``./checkpoints``) is used. The report holds the validation loss over the whole held-out split,
its perplexity, the character error rate (CER) and accuracy of greedy next-character
predictions on a held-out sample, and a sampled continuation of a prompt.
"""

from __future__ import annotations

print("quickstart: evaluating", flush=True)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from corral.sdk import Checkpointer, cer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, GPTConfig, Vocab, load_corpus, load_model, split_corpus  # noqa: E402

PROMPT = "The "


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.environ.get("QUICKSTART_OUT_DIR", "out"))
    p.add_argument(
        "--report", default=None, help="report path (default <out-dir>/eval_report.json)"
    )
    p.add_argument("--from-checkpoint", action="store_true", help="use the best checkpoint")
    p.add_argument("--sample-chars", type=int, default=2000, help="chars scored for CER")
    p.add_argument("--generate", type=int, default=200, help="chars to sample after the prompt")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=int(os.environ.get("QUICKSTART_THREADS", "2")))
    return p.parse_args(argv)


def model_from_checkpoint(vocab: Vocab) -> tuple[GPT, str]:
    """The best checkpoint by val_loss (else the newest) as a model."""
    checkpointer = Checkpointer(metric="val_loss", mode="min")
    info = checkpointer.best() or checkpointer.latest()
    if info is None:
        raise SystemExit(
            f"quickstart: no model in out/model/ and no checkpoint in {checkpointer.dir}: "
            "run train.py first"
        )
    state = checkpointer.restore(info)
    cfg = state["config"]
    model = GPT(
        GPTConfig(
            vocab_size=vocab.size,
            block_size=cfg["block_size"],
            n_layer=cfg["n_layer"],
            n_head=cfg["n_head"],
            n_embd=cfg["n_embd"],
        )
    )
    model.load_state_dict(state["model"])
    model.eval()
    return model, info.path


@torch.no_grad()
def full_val_loss(model: GPT, data: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-char loss over the whole split, in consecutive non-overlapping windows."""
    t = model.cfg.block_size
    n = (len(data) - 1) // t
    x = data[: n * t].view(n, t)
    y = data[1 : n * t + 1].view(n, t)
    total = 0.0
    for i in range(0, n, batch_size):
        _, loss = model(x[i : i + batch_size], y[i : i + batch_size])
        total += loss.item() * len(x[i : i + batch_size])
    return total / n


@torch.no_grad()
def greedy_next_chars(model: GPT, data: torch.Tensor, start: int, count: int) -> list[int]:
    """For each position in ``[start, start + count)``, the argmax next char given the
    ``block_size`` chars before it (every prediction sees a full context)."""
    t = model.cfg.block_size
    contexts = torch.stack([data[i - t : i] for i in range(start, start + count)])
    preds: list[int] = []
    for i in range(0, count, 256):
        logits, _ = model(contexts[i : i + 256])
        preds += logits[:, -1, :].argmax(dim=-1).tolist()
    return preds


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out_dir = Path(args.out_dir)
    report_path = Path(args.report) if args.report else out_dir / "eval_report.json"

    text = load_corpus()
    _, val_data = split_corpus(text, Vocab.from_text(text))
    model_dir = out_dir / "model"
    if not args.from_checkpoint and (model_dir / "config.json").is_file():
        model, vocab = load_model(model_dir)
        source = str(model_dir)
    else:
        vocab = Vocab.from_text(text)
        model, source = model_from_checkpoint(vocab)
    print(f"quickstart: model from {source}", flush=True)

    started = time.monotonic()
    val_loss = full_val_loss(model, val_data)

    t = model.cfg.block_size
    count = max(1, min(args.sample_chars, len(val_data) - t - 1))
    start = len(val_data) - count  # the end of the held-out split, after a full context
    reference = vocab.decode(val_data[start : start + count].tolist())
    predicted = vocab.decode(greedy_next_chars(model, val_data, start, count))
    accuracy = sum(a == b for a, b in zip(reference, predicted, strict=True)) / count

    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.tensor([vocab.encode(PROMPT)], dtype=torch.long)
    sample = vocab.decode(model.generate(prompt, args.generate, generator=gen)[0].tolist())

    report = {
        "val_loss": round(val_loss, 6),
        "perplexity": round(math.exp(val_loss), 4),
        "next_char_cer": round(cer(reference, predicted), 6),
        "next_char_accuracy": round(accuracy, 6),
        "val_chars": len(val_data),
        "cer_chars": count,
        "prompt": PROMPT,
        "sample": sample,
        "model": source,
        "eval_seconds": round(time.monotonic() - started, 3),
    }
    report_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = report_path.with_name(report_path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, report_path)
    print(
        f"quickstart: val_loss {report['val_loss']:.4f} perplexity {report['perplexity']:.2f} "
        f"next-char CER {report['next_char_cer']:.3f} -> {report_path}",
        flush=True,
    )
    print(f"quickstart: sample: {sample!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
