"""Pieces the Hugging Face Trainer tests share: a tiny token dataset and a preemption notice at
a chosen step. Import only after ``pytest.importorskip("transformers")``."""

from __future__ import annotations

import os
import signal
import time

import torch
import transformers


class TinyData(torch.utils.data.Dataset):
    """``n`` fixed sequences of 8 token ids (labels = inputs); ``delay`` seconds per item."""

    def __init__(self, n: int = 64, delay: float = 0.0):
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self.delay:
            time.sleep(self.delay)
        ids = torch.randint(0, 32, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


class SigtermAt(transformers.TrainerCallback):
    """Sends this process a SIGTERM at the end of step ``step`` (a preemption notice)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)
        return control
