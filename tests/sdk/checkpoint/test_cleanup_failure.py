"""A leftover that cannot be removed yet (a busy file on NFS, a flaky object store) does not fail
the next save: cleanup warns, the save goes on, and the next save tries the cleanup again."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from corral.sdk import Checkpointer, CheckpointWarning, LocalStorage


class StuckTrash(LocalStorage):
    """Removing a ``.trash`` leftover fails ``fails`` times."""

    def __init__(self, fails: int):
        self.fails = fails

    def rmtree(self, path: str) -> None:
        if path.endswith(".trash") and self.fails:
            self.fails -= 1
            raise OSError(16, "Device or resource busy", path)
        super().rmtree(path)


def test_a_stuck_leftover_warns_and_the_save_still_lands(tmp_path: Any) -> None:
    root = tmp_path / "ck"
    (root / "ckpt-1.trash").mkdir(parents=True)
    (root / "ckpt-1.trash" / "state.pkl").write_bytes(b"old")
    cp = Checkpointer(str(root), storage=StuckTrash(fails=1), async_save=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cp.save({"w": np.arange(4.0)}, 2)
    assert any(
        issubclass(w.category, CheckpointWarning) and "saving anyway" in str(w.message)
        for w in caught
    )
    assert [c.step for c in cp.checkpoints()] == [2]
    assert (root / "ckpt-1.trash").exists()  # still there: the next save tries again
    cp.save({"w": np.arange(4.0)}, 3)
    assert not (root / "ckpt-1.trash").exists()
    assert cp.restore()["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
