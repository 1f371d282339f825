"""A tiny HF Trainer run as a user writes one, for the tests that read its real output: a
randomly initialised GPT-2 built from a config (no download), a synthetic dataset prepared
first with a described progress bar as ``run_clm.py``'s tokenisation draws one (datasets'
``.map`` when datasets is installed, else a tqdm bar with the description and unit datasets
gives it), then ``Trainer.train()`` with its default progress bar on CPU.

``python hf_trainer.py OUTPUT_DIR MAX_STEPS [PACE_S]``: ``PACE_S`` seconds of sleep after each
step (default 0); training ends early once a file named ``release`` exists in the workdir.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

SEQ, VOCAB, EXAMPLES = 16, 64, 184


def prepared() -> list[list[int]]:
    """The examples' token ids, made the way run_clm.py makes them: with a described bar."""
    rows = [{"i": i} for i in range(EXAMPLES)]
    try:
        import datasets
    except ImportError:
        from tqdm.auto import tqdm

        return [
            [(row["i"] + k) % VOCAB for k in range(SEQ)]
            for row in tqdm(rows, desc="Running tokenizer on dataset", unit=" examples")
        ]
    table = datasets.Dataset.from_list(rows).map(
        lambda row: {"ids": [(row["i"] + k) % VOCAB for k in range(SEQ)]},
        desc="Running tokenizer on dataset",
    )
    return list(table["ids"])


class Examples(torch.utils.data.Dataset):
    def __init__(self, ids: list[list[int]]):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.tensor(self.ids[i])
        return {"input_ids": ids, "labels": ids}


class Pace(TrainerCallback):
    def __init__(self, pace: float):
        self.pace = pace

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.pace)
        if os.path.exists("release"):
            control.should_training_stop = True
        return control


def main() -> None:
    out, max_steps = sys.argv[1], int(sys.argv[2])
    pace = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2)
    )
    ids = prepared()
    args = TrainingArguments(
        output_dir=out,
        max_steps=max_steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        logging_steps=5,
        eval_strategy="steps",
        eval_steps=15,
        save_steps=10,
        learning_rate=5e-05,
        lr_scheduler_type="constant",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Examples(ids),
        eval_dataset=Examples(ids[:16]),
        callbacks=[Pace(pace)],
    )
    trainer.train()


if __name__ == "__main__":
    main()
