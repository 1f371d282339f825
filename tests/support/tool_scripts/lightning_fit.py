"""A tiny PyTorch Lightning run as a user writes one, for the tests that read its real output:
``ModelCheckpoint`` and the default progress bar (Rich's when ``rich`` is importable, as it is
beside corral), on CPU.

``python lightning_fit.py ROOT_DIR EPOCHS [tqdm]``: 16 batches an epoch, ``train_loss`` and
``val_loss`` shown on the bar; ``tqdm`` asks for Lightning's tqdm bar instead (its default
where rich is not installed).
"""

from __future__ import annotations

import sys

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar

BATCHES = 16


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, index):  # type: ignore[no-untyped-def]
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), prog_bar=True)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    root, epochs = sys.argv[1], int(sys.argv[2])
    bar = [TQDMProgressBar()] if sys.argv[3:] == ["tqdm"] else []
    torch.manual_seed(0)
    x = torch.randn(4 * BATCHES, 4)
    y = x.sum(1, keepdim=True) + 10 * torch.randn(4 * BATCHES, 1)  # noise: the loss stays up
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=epochs,
        default_root_dir=root,
        callbacks=[ModelCheckpoint(save_last=True), *bar],
        accelerator="cpu",
        log_every_n_steps=1,
        enable_model_summary=False,
    )
    trainer.fit(Regression(), data, data)


if __name__ == "__main__":
    main()
