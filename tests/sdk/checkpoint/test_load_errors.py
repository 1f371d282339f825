"""A checkpoint that verifies but cannot be loaded is an error, never a silent fresh start."""

from __future__ import annotations

import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from corral.sdk import Checkpointer, CheckpointError, CheckpointLoadError
from corral.sdk.checkpoint import CheckpointWarning

MODULE = "corral_test_moved_classes"


@pytest.fixture
def moved_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module holding a class, registered so pickle can find it (until a test removes it)."""
    module = types.ModuleType(MODULE)
    exec("class Sampler:\n    def __init__(self, pos):\n        self.pos = pos\n", module.__dict__)
    monkeypatch.setitem(sys.modules, MODULE, module)
    return module


def test_restore_raises_a_load_error_when_a_saved_class_was_renamed(tmp_path, moved_module):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"step": 1, "w": np.zeros(4)}, 1)
    cp.save({"step": 2, "w": np.ones(4), "sampler": moved_module.Sampler(7)}, 2)
    del moved_module.Sampler  # the class was renamed or moved since the save

    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # no "skipping" fallback either
        with pytest.raises(CheckpointLoadError, match=r"ckpt-2.*Sampler") as err:
            Checkpointer(tmp_path / "ck").restore()
    assert "verified" in str(err.value) and "moved or renamed" in str(err.value)
    assert isinstance(err.value, CheckpointError)


def test_restore_raises_a_load_error_when_a_saved_module_is_gone(tmp_path, moved_module):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"step": 1}, 1)
    cp.save({"step": 2, "sampler": moved_module.Sampler(7)}, 2)
    del sys.modules[MODULE]

    with pytest.raises(CheckpointLoadError, match=rf"ckpt-2.*{MODULE}"):
        Checkpointer(tmp_path / "ck").restore()


def test_restore_of_torch_tensors_without_torch_raises_a_load_error(tmp_path, monkeypatch):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"w": np.zeros(4)}, 1)
    cp.save({"w": torch.ones(4)}, 2)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails

    with pytest.raises(CheckpointLoadError, match="ckpt-2 holds torch tensors but torch is not"):
        Checkpointer(tmp_path / "ck").restore()


def test_unreadable_checkpoint_files_raise_a_load_error_not_a_fallback(tmp_path, monkeypatch):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"w": np.zeros(4)}, 1)
    cp.save({"w": np.ones(4)}, 2)
    reader = Checkpointer(tmp_path / "ck")
    real_map = reader.storage.map_file

    def map_file(path: str):
        if "ckpt-2" in path:
            raise PermissionError(13, "Permission denied", path)
        return real_map(path)

    monkeypatch.setattr(reader.storage, "map_file", map_file)
    with pytest.raises(CheckpointLoadError, match="ckpt-2: cannot be read"):
        reader.restore()


def test_corrupt_newest_checkpoint_still_falls_back_to_the_previous(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"step": 1}, 1)
    cp.save({"step": 2}, 2)
    state_file = tmp_path / "ck" / "ckpt-2" / "state.pkl"
    state_file.write_bytes(state_file.read_bytes()[:-1] + b"\x00")
    with pytest.warns(CheckpointWarning, match="ckpt-2: state.pkl does not match its sha256"):
        assert Checkpointer(tmp_path / "ck").restore() == {"step": 2 - 1}


def test_an_unlistable_checkpoint_directory_is_a_checkpoint_error_naming_it(
    tmp_path: Path, monkeypatch
):
    Checkpointer(tmp_path / "ck", async_save=False).save({"step": 1}, 1)
    reader = Checkpointer(tmp_path / "ck")

    def listdir(path: str):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(reader.storage, "listdir", listdir)
    with pytest.raises(CheckpointLoadError, match=r"cannot list .*ck.*Permission denied"):
        reader.restore()  # not a fresh start: the checkpoints are there, unreadable
    for call in (reader.latest, reader.checkpoints):
        with pytest.raises(CheckpointLoadError, match="cannot list"):
            call()
