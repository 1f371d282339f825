"""The on-disk layout: atomic publish, the COMPLETE manifest, integer steps, cleanup, replace."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from corral import __version__
from corral.errors import BadInput
from corral.sdk import Checkpointer, LocalStorage, open_storage
from corral.sdk.checkpoint import CheckpointWarning
from corral.sdk.storage import resolve_location


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    return tmp_path / "ck"


def state_for(step: int) -> dict:
    return {"w": np.full((64, 8), step, dtype=np.float32), "step": step, "note": f"s{step}"}


def test_non_finite_metrics_are_stored_as_text_and_read_back_as_floats(tmp_path: Path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    cp = Checkpointer(tmp_path / "ck", async_save=False, metric="loss")
    nested = {"per_class": [1.0, float("-inf")]}
    cp.save(state_for(1), 1, metrics={"loss": float("nan"), "gn": float("inf"), **nested})
    text = (tmp_path / "ck" / "ckpt-1" / "COMPLETE").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    assert json.loads(text)["metrics"] == {
        "loss": "nan", "gn": "inf", "per_class": [1.0, "-inf"]
    }  # fmt: skip
    (info,) = cp.checkpoints()
    assert np.isnan(info.metrics["loss"]) and info.metrics["gn"] == float("inf")
    assert info.metrics["per_class"] == [1.0, float("-inf")]
    assert cp.latest().metrics["gn"] == float("inf")
    assert cp.best() is None  # a NaN is never the best
    record = json.loads(progress.read_text().splitlines()[-1])
    assert record["kind"] == "checkpoint" and record["metrics"]["loss"] == "nan"


def test_a_manifest_with_null_metrics_from_an_older_corral_still_reads(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", async_save=False)
    cp.save(state_for(2), 2, metrics={"loss": 0.5})
    path = tmp_path / "ck" / "ckpt-2" / "COMPLETE"
    path.write_text(path.read_text().replace('"loss": 0.5', '"loss": null'))
    assert cp.latest(verify=False).metrics == {"loss": None}


def test_save_writes_files_and_complete_manifest_with_sizes_and_sha256(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", async_save=False)
    cp.save(state_for(7), 7, metrics={"loss": 0.5, "nan": float("nan"), "n": np.float32(2.0)})
    d = tmp_path / "ck" / "ckpt-7"
    manifest = json.loads((d / "COMPLETE").read_text())
    assert manifest["step"] == 7
    assert manifest["format"] == "corral-checkpoint"
    assert manifest["format_version"] == 1
    assert manifest["corral_version"] == __version__
    assert manifest["metrics"] == {"loss": 0.5, "nan": "nan", "n": 2.0}
    assert manifest["time"] > 1.6e9
    assert set(manifest["files"]) == {"state.pkl", "tensors-00000.safetensors"}
    for name, entry in manifest["files"].items():
        data = (d / name).read_bytes()
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert sorted(os.listdir(tmp_path / "ck")) == ["ckpt-7"]  # no .tmp left behind


def test_steps_sort_as_integers_not_strings(ck: Path):
    cp = Checkpointer(ck, keep_last=10)
    for step in (9, 10, 2, 100):
        cp.save(state_for(step), step)
    cp.wait()
    assert [c.step for c in cp.checkpoints()] == [2, 9, 10, 100]
    assert cp.latest().step == 100
    assert cp.restore()["step"] == 100


def test_leftover_tmp_dirs_are_ignored_by_readers_and_cleaned_by_the_next_writer(ck: Path):
    cp = Checkpointer(ck, async_save=False)
    cp.save(state_for(1), 1)
    torn = ck / "ckpt-5.tmp"
    torn.mkdir()
    (torn / "state.pkl").write_bytes(b"half")
    (ck / "ckpt-3.trash").mkdir()
    reader = Checkpointer(ck)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reader.latest().step == 1
        assert reader.restore()["step"] == 1
    assert torn.exists()  # a reader never deletes: the writer may still be at work
    writer = Checkpointer(ck, async_save=False)
    writer.save(state_for(2), 2)
    assert sorted(os.listdir(ck)) == ["ckpt-1", "ckpt-2"]


def test_saving_the_same_step_twice_replaces_it(ck: Path):
    cp = Checkpointer(ck)
    cp.save({"v": np.zeros(3)}, 4, metrics={"loss": 1.0})
    cp.save({"v": np.ones(3)}, 4, metrics={"loss": 0.5})
    cp.wait()
    assert sorted(os.listdir(ck)) == ["ckpt-4"]
    assert cp.latest().metrics == {"loss": 0.5}
    assert np.array_equal(Checkpointer(ck).restore()["v"], np.ones(3))


def test_interrupted_replace_falls_back_to_the_old_copy_and_is_repaired(ck: Path):
    cp = Checkpointer(ck, async_save=False)
    cp.save(state_for(3), 3)
    # A crash between "ckpt-3 -> ckpt-3.old" and ".tmp -> ckpt-3" leaves only the old copy.
    os.rename(ck / "ckpt-3", ck / "ckpt-3.old")
    reader = Checkpointer(ck)
    assert reader.latest().step == 3
    assert reader.restore()["step"] == 3
    Checkpointer(ck, async_save=False).save(state_for(4), 4)
    assert sorted(os.listdir(ck)) == ["ckpt-3", "ckpt-4"]


def test_durable_checkpoint_appends_a_progress_record(tmp_path: Path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    cp = Checkpointer(tmp_path / "ck")
    cp.save(state_for(12), 12, metrics={"val_loss": 0.25})
    cp.wait()
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert len(records) == 1
    assert records[0]["kind"] == "checkpoint"
    assert records[0]["step"] == 12
    assert records[0]["path"] == str(tmp_path / "ck" / "ckpt-12")
    assert records[0]["metrics"] == {"val_loss": 0.25}


def test_dir_defaults_to_env_then_to_checkpoints_in_cwd(tmp_path: Path, monkeypatch):
    assert Checkpointer().dir == str(Path.cwd() / "checkpoints")
    monkeypatch.setenv("CORRAL_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    assert Checkpointer().dir == str(tmp_path / "from-env")
    assert Checkpointer(f"file://{tmp_path}/uri").dir == str(tmp_path / "uri")


def test_open_storage_accepts_paths_and_file_uris_and_rejects_other_schemes(tmp_path: Path):
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    storage, path = resolve_location(f"file://{tmp_path}/x")
    assert isinstance(storage, LocalStorage)
    assert path == f"{tmp_path}/x"
    with pytest.raises(BadInput, match="'gs://' is not supported"):
        open_storage("gs://bucket/run")
    with pytest.raises(BadInput, match="remote host"):
        open_storage("file://otherhost/x")


def test_bad_arguments_are_bad_input(tmp_path: Path):
    with pytest.raises(BadInput, match="needs a metric"):
        Checkpointer(tmp_path, keep_best=2)
    with pytest.raises(BadInput, match="mode"):
        Checkpointer(tmp_path, mode="lowest")
    with pytest.raises(BadInput, match="prefix"):
        Checkpointer(tmp_path, prefix="a/b")
    with pytest.raises(BadInput, match="prefix"):
        Checkpointer(tmp_path, prefix=5)
    for bad in ("5", -1, float("nan"), True):
        with pytest.raises(BadInput, match="grace_seconds"):
            Checkpointer(tmp_path, grace_seconds=bad)
    with pytest.raises(BadInput, match="dir must be a path"):
        Checkpointer(5)
    with pytest.raises(BadInput, match="storage must implement"):
        Checkpointer(tmp_path, storage=object())
    cp = Checkpointer(tmp_path)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(BadInput, match="step"):
            cp.save({}, bad)
    for bad in ([("loss", 0.5)], 0.5, "loss"):
        with pytest.raises(BadInput, match="metrics must be a dict"):
            cp.save({}, 1, metrics=bad)
    with pytest.raises(BadInput, match="metric"):
        cp.best()


def test_custom_prefix_keeps_separate_series_in_one_directory(ck: Path):
    a = Checkpointer(ck, prefix="model", async_save=False)
    b = Checkpointer(ck, prefix="ema", async_save=False)
    a.save({"who": "model"}, 1)
    b.save({"who": "ema"}, 2)
    assert a.restore()["who"] == "model"
    assert b.restore()["who"] == "ema"
    assert [c.step for c in a.checkpoints()] == [1]


class CopyRenameStorage(LocalStorage):
    """Like an object store: rename copies then deletes (not atomic)."""

    atomic_rename = False

    def rename(self, src: str, dst: str) -> None:
        shutil.copytree(src, dst)
        shutil.rmtree(src)


def test_storage_without_atomic_rename_writes_in_place_with_the_manifest_last(ck: Path):
    st = CopyRenameStorage()
    cp = Checkpointer(str(ck), storage=st, keep_last=2)
    for step in (1, 2, 3, 3):
        cp.save(state_for(step), step)
    cp.wait()
    # The re-save of step 3 went to a new version beside the first copy, which it then deleted.
    assert sorted(os.listdir(ck)) == ["ckpt-2", "ckpt-3.v1"]
    assert [(c.step, c.name) for c in cp.checkpoints()] == [(2, "ckpt-2"), (3, "ckpt-3")]
    # An interrupted in-place write: files but no manifest -> skipped, then cleaned by a writer.
    (ck / "ckpt-9").mkdir()
    (ck / "ckpt-9" / "state.pkl").write_bytes(b"partial")
    with pytest.warns(CheckpointWarning, match="ckpt-9 is incomplete"):
        assert Checkpointer(str(ck), storage=st).restore()["step"] == 3
    Checkpointer(str(ck), storage=st, keep_last=5, async_save=False).save(state_for(4), 4)
    assert sorted(os.listdir(ck)) == ["ckpt-2", "ckpt-3.v1", "ckpt-4"]
    assert Checkpointer(str(ck), storage=st).restore("ckpt-3")["step"] == 3


def test_a_pending_save_is_flushed_at_interpreter_exit(ck: Path):
    script = (
        "import numpy as np\n"
        "from corral.sdk import Checkpointer\n"
        f"cp = Checkpointer({str(ck)!r})\n"
        "cp.save({'w': np.full(2_000_000, 3.0)}, 8)\n"  # 16 MB: still writing when we leave
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    state = Checkpointer(ck).restore()
    assert state is not None and np.all(state["w"] == 3.0)


def test_a_save_after_close_is_still_flushed_at_interpreter_exit(ck: Path):
    script = (
        "import time\n"
        "import numpy as np\n"
        "from corral.sdk import Checkpointer\n"
        f"cp = Checkpointer({str(ck)!r})\n"
        "cp.save({'w': np.zeros(4)}, 1)\n"
        "cp.close()\n"
        "fsync_dir = cp.storage.fsync_dir\n"
        "cp.storage.fsync_dir = lambda p: (time.sleep(0.3), fsync_dir(p))\n"  # a slow disk
        "cp.save({'w': np.full(1000, 3.0)}, 8)\n"  # still writing when the script ends
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    state = Checkpointer(ck).restore()
    assert state is not None and np.all(state["w"] == 3.0)


def test_a_pending_save_of_several_tensor_files_is_flushed_at_interpreter_exit(ck: Path):
    """A state bigger than one tensor file is written by several threads; at exit those must
    still start (a ThreadPoolExecutor refuses new work once the interpreter is exiting)."""
    script = (
        "import numpy as np\n"
        "from corral.sdk import Checkpointer, serialize\n"
        "serialize.SHARD_BYTES = 4096\n"  # one tensor file per array, as for a large state
        f"cp = Checkpointer({str(ck)!r})\n"
        "cp.save({k: np.full(1000, 3.0) for k in 'abcd'}, 8)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    state = Checkpointer(ck).restore()
    assert state is not None and all(np.all(state[k] == 3.0) for k in "abcd")
    assert len([n for n in os.listdir(ck / "ckpt-8") if n.endswith(".safetensors")]) == 4


def test_a_large_save_from_an_atexit_handler_is_written(ck: Path):
    """A state big enough for the parallel snapshot copy, saved by the script's own atexit
    handler (after the interpreter has begun to exit), is still snapshotted and written."""
    script = (
        "import atexit\n"
        "import numpy as np\n"
        "from corral.sdk import Checkpointer, staging\n"
        "staging.PARALLEL_COPY_BYTES = 0\n"  # copy on several threads, as for a large state
        f"cp = Checkpointer({str(ck)!r})\n"
        "state = {'w': np.full(100_000, 3.0)}\n"
        "atexit.register(lambda: cp.save(state, 1))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    state = Checkpointer(ck).restore()
    assert state is not None and np.all(state["w"] == 3.0)


def test_a_checkpoint_from_a_newer_corral_stops_restore_instead_of_falling_back(ck: Path):
    """Falling back to an older checkpoint would silently throw away the newer training."""
    from corral.sdk.manifest import CheckpointLoadError

    cp = Checkpointer(ck, keep_last=5)
    for step in (1, 2):
        cp.save(state_for(step), step)
    cp.wait()
    manifest_path = ck / "ckpt-2" / "COMPLETE"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = 99
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointLoadError, match=r"ckpt-2: written by a newer corral.*format 99"):
        Checkpointer(ck).restore()
    with pytest.raises(CheckpointLoadError, match="upgrade corral"):
        Checkpointer(ck).restore("ckpt-2")
    assert Checkpointer(ck).restore("ckpt-1")["step"] == 1  # older ones stay readable
