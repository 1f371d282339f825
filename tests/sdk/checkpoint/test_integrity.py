"""Restore verifies every checkpoint: corrupt or incomplete ones are skipped, loudly."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from corral.sdk import Checkpointer, CheckpointError, LocalStorage
from corral.sdk.checkpoint import CheckpointWarning


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    cp = Checkpointer(tmp_path / "ck", keep_last=5)
    for step in (1, 2, 3):
        cp.save(
            {"w": np.full(4096, step, dtype=np.float64), "step": step}, step, {"loss": 1 / step}
        )
    cp.wait()
    return tmp_path / "ck"


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_flipped_byte_in_tensors_is_skipped_with_a_warning_and_previous_used(ck: Path):
    flip_byte(ck / "ckpt-3" / "tensors-00000.safetensors", 20_000)
    cp = Checkpointer(ck)
    with pytest.warns(CheckpointWarning, match=r"ckpt-3: tensors-00000.safetensors does not match"):
        state = cp.restore()
    assert state["step"] == 2
    assert np.all(state["w"] == 2)
    with pytest.warns(CheckpointWarning, match="ckpt-3"):
        assert cp.latest().step == 2


def test_flipped_byte_in_pickled_state_is_detected(ck: Path):
    flip_byte(ck / "ckpt-3" / "state.pkl", 5)
    with pytest.warns(CheckpointWarning, match=r"ckpt-3: state.pkl does not match its sha256"):
        assert Checkpointer(ck).restore()["step"] == 2


def test_truncated_file_is_skipped_with_a_warning(ck: Path):
    target = ck / "ckpt-3" / "tensors-00000.safetensors"
    os.truncate(target, target.stat().st_size // 2)
    with pytest.warns(CheckpointWarning, match=r"ckpt-3: tensors-00000.safetensors has \d+ bytes"):
        assert Checkpointer(ck).restore()["step"] == 2


def test_missing_complete_marker_is_skipped_with_a_warning(ck: Path):
    os.remove(ck / "ckpt-3" / "COMPLETE")
    cp = Checkpointer(ck)
    with pytest.warns(CheckpointWarning, match="ckpt-3 is incomplete"):
        assert cp.restore()["step"] == 2
    assert [c.step for c in cp.checkpoints()] == [1, 2]


def test_missing_data_file_and_garbage_manifest_are_skipped(ck: Path):
    os.remove(ck / "ckpt-3" / "state.pkl")
    (ck / "ckpt-2" / "COMPLETE").write_text("{not json")
    with pytest.warns(CheckpointWarning) as record:
        assert Checkpointer(ck).restore()["step"] == 1
    messages = [str(w.message) for w in record]
    assert any("ckpt-3: state.pkl is missing" in m for m in messages)
    assert any("ckpt-2: COMPLETE manifest is not valid JSON" in m for m in messages)


def test_nothing_valid_returns_none_and_fresh_directory_returns_none(ck: Path, tmp_path: Path):
    assert Checkpointer(tmp_path / "empty").restore() is None
    assert Checkpointer(tmp_path / "empty").latest() is None
    for step in (1, 2, 3):
        flip_byte(ck / f"ckpt-{step}" / "tensors-00000.safetensors", 100)
    with pytest.warns(CheckpointWarning):
        assert Checkpointer(ck).restore() is None


def test_restore_of_a_corrupt_path_raises_checkpoint_error(ck: Path):
    flip_byte(ck / "ckpt-2" / "tensors-00000.safetensors", 3000)
    cp = Checkpointer(ck)
    with pytest.raises(CheckpointError, match=r"ckpt-2: tensors-00000.safetensors does not match"):
        cp.restore(ck / "ckpt-2")
    with pytest.raises(CheckpointError, match="does not exist"):
        cp.restore("ckpt-99")
    assert cp.restore("ckpt-1")["step"] == 1  # a name inside the directory works too
    assert cp.restore(cp.checkpoints()[-1])["step"] == 3  # and a CheckpointInfo


def test_best_skips_a_corrupt_best_checkpoint(ck: Path):
    flip_byte(ck / "ckpt-3" / "state.pkl", 1)
    cp = Checkpointer(ck, metric="loss", mode="min")
    with pytest.warns(CheckpointWarning, match="ckpt-3"):
        assert cp.best().step == 2


class FailingStorage(LocalStorage):
    """The disk fills up after ``limit`` bytes."""

    def __init__(self, limit: int):
        self.limit = limit
        self.written = 0

    def open_write(self, path: str):
        inner = super().open_write(path)
        outer = self

        class Writer:
            def write(self, data):
                outer.written += len(data)
                if outer.written > outer.limit:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return inner.write(data)

            def close(self):
                inner.close()

            def abort(self):
                inner.abort()

        return Writer()


def test_background_failure_is_reraised_by_wait_and_leaves_no_checkpoint(tmp_path: Path):
    storage = FailingStorage(limit=10_000)
    cp = Checkpointer(str(tmp_path / "ck"), storage=storage)
    cp.save({"w": np.zeros(100_000)}, 5)  # returns: the write happens in the background
    with pytest.raises(CheckpointError, match=r"ckpt-5 failed: .*No space left on device"):
        cp.wait()
    cp.wait()  # the failure is reported once
    assert os.listdir(tmp_path / "ck") == []  # the partial .tmp is removed
    assert cp.restore() is None
    storage.limit = 10**9
    cp.save({"w": np.ones(10)}, 6)
    cp.wait()
    assert cp.restore()["w"].sum() == 10


def test_next_save_reraises_an_unreported_background_failure(tmp_path: Path):
    cp = Checkpointer(str(tmp_path / "ck"), storage=FailingStorage(limit=10))
    cp.save({"w": np.zeros(1000)}, 1)
    with pytest.raises(CheckpointError, match="ckpt-1 failed"):
        cp.save({"w": np.zeros(1000)}, 2)


def test_unpicklable_state_fails_in_save_itself(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="cannot be saved"):
        cp.save({"f": lambda: 1}, 1)
    assert not (tmp_path / "ck").exists() or os.listdir(tmp_path / "ck") == []


class ThrottledDeletes(LocalStorage):
    """An object-store-like failure (a corral StorageError, not an OSError) on every delete."""

    def rename(self, src: str, dst: str) -> None:
        if dst.endswith(".trash"):
            from corral.storage.errors import StorageThrottled

            raise StorageThrottled(f"{src}: SlowDown")
        super().rename(src, dst)


@pytest.mark.parametrize("async_save", [True, False])
def test_a_storage_error_while_applying_retention_is_a_warning_not_a_lost_save(
    tmp_path: Path, monkeypatch, async_save
):
    crashed = []
    monkeypatch.setattr("threading.excepthook", lambda args: crashed.append(args.exc_value))
    cp = Checkpointer(
        str(tmp_path / "ck"), storage=ThrottledDeletes(), keep_last=1, async_save=async_save
    )
    cp.save({"w": np.zeros(10)}, 1)
    with pytest.warns(CheckpointWarning, match="retention failed.*SlowDown"):
        cp.save({"w": np.ones(10)}, 2)  # durable; deleting ckpt-1 fails
        cp.wait()
    assert crashed == []
    assert cp.last_saved_step == 2 and cp.restore()["w"].sum() == 10
