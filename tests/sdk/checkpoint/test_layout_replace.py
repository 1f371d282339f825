"""Replacing a step on local disk (``ckpt-N -> ckpt-N.old``, ``.tmp -> ckpt-N``, remove ``.old``)
when a step of it fails: the old copy stays restorable, and a checkpoint that retention deleted
never comes back from a leftover ``.old``."""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from corral.sdk import Checkpointer, CheckpointError, LocalStorage


def state(step: int, version: int) -> dict:
    return {"w": np.full(16, version, dtype=np.float32), "step": step, "version": version}


class FlakyLocal(LocalStorage):
    """A local disk whose next ``fail_at`` operation of a replace raises (once)."""

    def __init__(self) -> None:
        self.fail_at: str | None = None  # "second_rename" or "after_second_rename"
        self._after = False

    def _fail(self, where: str) -> None:
        if self.fail_at == where:
            self.fail_at = None
            raise OSError(errno.EIO, f"injected failure at {where}")

    def rename(self, src: str, dst: str) -> None:
        if src.endswith(".tmp") and os.path.isdir(dst + ".old"):
            self._fail("second_rename")  # .tmp -> ckpt-N, right after ckpt-N -> ckpt-N.old
            super().rename(src, dst)
            self._after = True
            return
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        if self._after:
            self._after = False
            self._fail("after_second_rename")
        super().fsync_dir(path)


def names(ck: Path) -> list[str]:
    return sorted(os.listdir(ck))


def steps(cp: Checkpointer) -> list[int]:
    return [c.step for c in cp.checkpoints()]


def test_a_failure_after_the_new_copy_is_in_place_leaves_no_old_copy_for_retention_to_revive(
    tmp_path: Path,
):
    """The sequence behind "ckpt-N.old can briefly reappear as ckpt-N after retention": the
    replace fails after ``.tmp -> ckpt-3`` (here the directory fsync raises), so ``ckpt-3.old``
    stays next to the new ``ckpt-3``; retention later deletes ``ckpt-3`` and the stale
    ``ckpt-3.old`` became step 3 again (and the next writer's cleanup renamed it back)."""
    ck = tmp_path / "ck"
    st = FlakyLocal()
    cp = Checkpointer(str(ck), storage=st, keep_last=1, async_save=False)
    cp.save(state(3, 1), 3)
    st.fail_at = "after_second_rename"
    with pytest.raises(CheckpointError, match="injected failure at after_second_rename"):
        cp.save(state(3, 2), 3)
    assert Checkpointer(str(ck)).restore()["version"] == 2  # the new copy is in place
    cp.save(state(4, 1), 4)  # retention (keep_last=1) deletes step 3
    assert names(ck) == ["ckpt-4"]
    assert steps(cp) == [4]
    Checkpointer(str(ck), keep_last=5, async_save=False).save(state(5, 1), 5)  # cleanup
    assert names(ck) == ["ckpt-4", "ckpt-5"]


def test_a_failed_second_rename_keeps_the_old_copy_and_a_retried_save_leaves_no_stale_old(
    tmp_path: Path,
):
    """``ckpt-3 -> ckpt-3.old`` done, ``.tmp -> ckpt-3`` fails: step 3 is still restorable
    from its old copy. Saving step 3 again then published ``ckpt-3`` next to the stale
    ``ckpt-3.old``, which came back as step 3 (the *older* state) once retention deleted
    ``ckpt-3``."""
    ck = tmp_path / "ck"
    st = FlakyLocal()
    cp = Checkpointer(str(ck), storage=st, keep_last=1, async_save=False)
    cp.save(state(3, 1), 3)
    st.fail_at = "second_rename"
    with pytest.raises(CheckpointError, match="injected failure at second_rename"):
        cp.save(state(3, 2), 3)
    assert names(ck) == ["ckpt-3.old"]  # no torn copy, the .tmp removed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Checkpointer(str(ck)).latest().step == 3
        assert Checkpointer(str(ck)).restore()["version"] == 1
        assert Checkpointer(str(ck)).restore("ckpt-3")["version"] == 1  # by name too
        assert cp.restore()["version"] == 1
    cp.save(state(3, 3), 3)  # the retry
    assert names(ck) == ["ckpt-3"]
    assert cp.restore()["version"] == 3
    cp.save(state(4, 1), 4)  # retention deletes step 3
    assert names(ck) == ["ckpt-4"]
    assert steps(cp) == [4]


def test_retention_deletes_a_leftover_old_copy_together_with_its_step(tmp_path: Path):
    """Whatever left ``ckpt-3.old`` next to ``ckpt-3`` (an older corral, a copy by hand),
    deleting step 3 deletes both, the ``.old`` first: step 3 never shows up again, not even
    between two moves."""
    ck = tmp_path / "ck"
    seen: list[list[int]] = []

    class Watching(LocalStorage):
        def rename(self, src: str, dst: str) -> None:
            super().rename(src, dst)
            seen.append(steps(Checkpointer(str(ck))))  # what a reader sees after each move

    cp = Checkpointer(str(ck), storage=Watching(), keep_last=1, async_save=False)
    cp.save(state(3, 2), 3)
    os.mkdir(ck / "ckpt-3.old")  # a stale older copy beside the current one
    (ck / "ckpt-3.old" / "COMPLETE").write_bytes((ck / "ckpt-3" / "COMPLETE").read_bytes())
    seen.clear()
    cp.save(state(4, 1), 4)  # retention (keep_last=1) deletes step 3
    assert names(ck) == ["ckpt-4"]
    assert seen[0] == [3, 4] and seen[-1] == [4]
    assert all(s in ([3, 4], [4]) for s in seen), seen
    assert seen.index([4]) == len(seen) - 1 or all(s == [4] for s in seen[seen.index([4]) :])


def test_the_next_writer_still_repairs_a_replace_cut_between_the_renames(tmp_path: Path):
    ck = tmp_path / "ck"
    st = FlakyLocal()
    cp = Checkpointer(str(ck), storage=st, async_save=False)
    cp.save(state(3, 1), 3)
    st.fail_at = "second_rename"
    with pytest.raises(CheckpointError):
        cp.save(state(3, 2), 3)
    Checkpointer(str(ck), async_save=False).save(state(4, 1), 4)
    assert names(ck) == ["ckpt-3", "ckpt-4"]
    assert Checkpointer(str(ck)).restore("ckpt-3")["version"] == 1
