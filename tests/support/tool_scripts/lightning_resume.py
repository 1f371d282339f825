"""A tiny PyTorch Lightning script as a user writes one to be resumable: ``ModelCheckpoint``
saving every few optimizer steps and keeping them all, the default progress bar, and
``trainer.fit(..., ckpt_path=...)`` with the command line's ``--ckpt_path``.

``python lightning_resume.py --max_epochs 5 --every 5 [--ckpt_path FILE]``: 8 batches an
epoch. Each fit prints ``fit starts at global step N`` (Lightning's own count, restored from the
checkpoint when one is given).

The test's own pacing, not Lightning's: with ``$PACE_S`` set, each batch of the first attempt
(``$CORRAL_ATTEMPT`` 1) sleeps that long, so a preemption lands mid-run.
"""

from __future__ import annotations

import argparse
import os
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

BATCHES = 8


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Report(Callback):
    def __init__(self, pace: float) -> None:
        self.pace = pace

    def on_train_start(self, trainer, module):  # type: ignore[no-untyped-def]
        print(f"fit starts at global step {trainer.global_step}", flush=True)

    def on_train_batch_end(self, trainer, module, outputs, batch, index):  # type: ignore[no-untyped-def]
        time.sleep(self.pace)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_epochs", type=int, default=5)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--ckpt_path", default=None)
    args = parser.parse_args()
    first = os.environ.get("CORRAL_ATTEMPT", "1") == "1"
    pace = float(os.environ.get("PACE_S", "0")) if first else 0.0
    torch.manual_seed(0)
    x = torch.randn(4 * BATCHES, 4)
    y = x.sum(1, keepdim=True)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        callbacks=[
            ModelCheckpoint(every_n_train_steps=args.every, save_top_k=-1),
            Report(pace),
        ],
        accelerator="cpu",
        log_every_n_steps=1,
        enable_model_summary=False,
    )
    trainer.fit(Regression(), data, ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
