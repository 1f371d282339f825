"""A tiny HF Trainer script shaped like transformers' ``run_clm.py``: ``TrainingArguments`` from
the command line (``HfArgumentParser``), a randomly initialised GPT-2 built from a config (no
download), a synthetic dataset, and ``trainer.train(resume_from_checkpoint=...)`` with the
command line's ``--resume_from_checkpoint``, as run_clm.py passes it.

``python hf_run_clm.py --output_dir out --max_steps 40 --save_steps 5 [any TrainingArguments]``

The test's own pacing, not the Trainer's: with ``$PACE_S`` set, each step of the first attempt
(``$CORRAL_ATTEMPT`` 1) sleeps that long, so a preemption lands mid-run; later attempts run at
full speed.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

SEQ, VOCAB, EXAMPLES = 16, 64, 64


class Examples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return EXAMPLES

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.tensor([(i + k) % VOCAB for k in range(SEQ)])
        return {"input_ids": ids, "labels": ids}


class Pace(TrainerCallback):
    def __init__(self, pace: float):
        self.pace = pace

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.pace)
        return control


def main() -> None:
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    first = os.environ.get("CORRAL_ATTEMPT", "1") == "1"
    pace = float(os.environ.get("PACE_S", "0")) if first else 0.0
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2)
    )
    trainer = Trainer(model=model, args=args, train_dataset=Examples(), callbacks=[Pace(pace)])
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
