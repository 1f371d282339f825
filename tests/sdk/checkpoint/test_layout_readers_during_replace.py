"""Readers in another process while the writer replaces a step, and restoring by the path or
name of a copy that has been replaced: the reader gets the step's current copy, never an older
step (nor an older copy of the step) because the copy it had found moved meanwhile."""

from __future__ import annotations

import errno
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.sdk import Checkpointer, LocalStorage, Storage

from . import test_object_store_resave as resave
from .test_object_store_resave import Crash, Injector, crash_when, put, seeded

# The fixtures: a storage without atomic rename (a local directory, S3 on a moto server).
moto_endpoint, place = resave.moto_endpoint, resave.place

READS = ("read_bytes", "open_read", "map_file", "size", "isfile")


class Pausing:
    """A reader's storage: the first read under ``pattern`` first lets ``writer()`` run (another
    process replacing the step between the reader's listing and its reading)."""

    def __init__(self, inner: Any, pattern: str, writer: Callable[[], None]):
        self.inner, self.pattern, self.writer = inner, pattern, writer
        self.atomic_rename = inner.atomic_rename
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in READS:
            return attr

        def call(path: str, *args: Any) -> Any:
            if not self.fired and re.search(self.pattern, path):
                self.fired = True
                self.writer()
            return attr(path, *args)

        return call


AT = {
    "manifest": r"ckpt-5/COMPLETE$",  # listed ckpt-5, the writer replaces it, then reads it
    "files": r"ckpt-5/(state\.pkl|tensors-)",  # read its manifest, then the files are gone
}


def reader_after_resave(storage: Storage, root: str, at: str, how: str) -> Any:
    """What a reader that found ``ckpt-5`` (version A) gets when a writer re-saves it (B) right
    then: ``how`` is restore, latest or checkpoints."""

    def writer() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            put(Checkpointer(root, storage=storage, keep_last=10, async_save=False), "B", 5)

    reader = Checkpointer(root, storage=Pausing(storage, AT[at], writer))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "skipping checkpoint ckpt-5"
        if how == "restore":
            return reader.restore()["version"]
        if how == "latest":
            return reader.latest().metrics["version"]
        return [(c.step, c.metrics["version"]) for c in reader.checkpoints()]


RACES = [  # (where the reader pauses, what it does); checkpoints() reads manifests only
    ("manifest", "restore"),
    ("manifest", "latest"),
    ("manifest", "checkpoints"),
    ("files", "restore"),
    ("files", "latest"),
]


@pytest.mark.parametrize(("at", "how"), RACES)
def test_object_store_reader_racing_a_resave_gets_the_new_copy_not_an_older_step(place, at, how):
    """Sequence: a reader lists the directory (ckpt-4, ckpt-5: version A); the writer writes
    ckpt-5.v1 (B) and deletes ckpt-5; the reader then reads ckpt-5. It skipped step 5 with a
    warning and restored step 4 (latest() was step 4, checkpoints() lacked step 5)."""
    storage, root = place()
    seeded(storage, root)
    got = reader_after_resave(storage, root, at, how)
    if how == "checkpoints":
        assert got == [(4, "A"), (5, "B")]
    else:
        assert got == "B"


@pytest.mark.parametrize("how", ["restore", "latest", "checkpoints"])
def test_local_reader_racing_a_replace_cut_between_the_renames_gets_the_old_copy(
    tmp_path: Path, how: str
):
    """Local disk: the reader lists ckpt-5; the writer renames ckpt-5 -> ckpt-5.old and is
    killed before ``.tmp -> ckpt-5``; the reader reads ckpt-5 (gone). Step 5 is ckpt-5.old
    now (readers use it), yet the reader skipped to step 4."""
    root = str(tmp_path / "ck")
    storage = LocalStorage()
    seeded(storage, root)

    def writer() -> None:
        killed = Injector(storage, fail_when=crash_when("rename", r"ckpt-5\.tmp$"), crash=True)
        with pytest.raises(Crash):
            put(Checkpointer(root, storage=killed, async_save=False), "B", 5)
        assert sorted(os.listdir(root)) == ["ckpt-4", "ckpt-5.old", "ckpt-5.tmp"]

    reader = Checkpointer(root, storage=Pausing(storage, AT["manifest"], writer))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if how == "restore":
            assert reader.restore()["version"] == "A"
        elif how == "latest":
            assert reader.latest().step == 5
        else:
            assert [c.step for c in reader.checkpoints()] == [4, 5]


def test_local_best_racing_a_replace_gets_the_step(tmp_path: Path):
    root = str(tmp_path / "ck")
    storage = LocalStorage()
    cp = Checkpointer(root, keep_last=10, async_save=False, metric="loss")
    cp.save({"v": 1}, 4, metrics={"loss": 2.0})
    cp.save({"v": 2}, 5, metrics={"loss": 1.0})

    def writer() -> None:
        killed = Injector(storage, fail_when=crash_when("rename", r"ckpt-5\.tmp$"), crash=True)
        with pytest.raises(Crash):
            Checkpointer(root, storage=killed, async_save=False).save({"v": 3}, 5, {"loss": 0.5})

    pausing = Pausing(storage, r"ckpt-5/state\.pkl$", writer)
    reader = Checkpointer(root, storage=pausing, metric="loss")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        best = reader.best()
    assert best is not None and best.step == 5


# --- restoring by the path or name of a replaced copy -----------------------------------------


def test_object_store_path_of_a_replaced_copy_left_complete_restores_the_current_copy(place):
    """Sequence: a re-save of step 5 whose deletion of the old copy fails (the save stands, a
    warning): ckpt-5 (A) and ckpt-5.v1 (B) are both complete. restore("ckpt-5") and latest()
    give B, but restore(<root>/ckpt-5), the path the progress record of the first save named,
    gave A: the older copy, which the next writer then deletes."""
    storage, root = place()
    seeded(storage, root)
    failing = Injector(storage, fail_when=crash_when("remove", r"ckpt-5/COMPLETE$"))
    with pytest.warns(Warning, match="could not be deleted yet"):
        put(Checkpointer(root, storage=failing, keep_last=10, async_save=False), "B", 5)
    assert sorted(storage.listdir(root)) == ["ckpt-4", "ckpt-5", "ckpt-5.v1"]
    reader = Checkpointer(root, storage=storage)
    assert reader.restore("ckpt-5")["version"] == "B"
    assert reader.restore(storage.join(root, "ckpt-5"))["version"] == "B"
    assert reader.restore(storage.join(root, "ckpt-5") + "/")["version"] == "B"


def test_object_store_path_of_a_half_deleted_copy_restores_the_current_copy(place):
    """Sequence: the writer wrote ckpt-5.v1 (B), removed ckpt-5/COMPLETE and was killed before
    deleting the rest of ckpt-5. restore(<root>/ckpt-5) raised "incomplete" although step 5
    is whole in ckpt-5.v1 (the same holds for a reader between those two deletions)."""
    storage, root = place()
    seeded(storage, root)
    killed = Injector(storage, fail_when=crash_when("rmtree", r"ckpt-5$"), crash=True)
    with pytest.raises(Crash):
        put(Checkpointer(root, storage=killed, async_save=False), "B", 5)
    reader = Checkpointer(root, storage=storage)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reader.restore(storage.join(root, "ckpt-5"))["version"] == "B"


def test_object_store_name_of_a_replaced_version_restores_the_current_copy(place):
    """restore("ckpt-5.v1") by name once ckpt-5.v2 has replaced it: "does not exist", while
    restore(<root>/ckpt-5.v1), the same copy by path, finds the current one."""
    storage, root = place()
    seeded(storage, root)
    writer = Checkpointer(root, storage=storage, keep_last=10, async_save=False)
    put(writer, "B", 5)
    put(writer, "C", 5)
    assert sorted(storage.listdir(root)) == ["ckpt-4", "ckpt-5.v2"]
    reader = Checkpointer(root, storage=storage)
    assert reader.restore(storage.join(root, "ckpt-5.v1"))["version"] == "C"
    assert reader.restore("ckpt-5.v1")["version"] == "C"
    assert reader.restore("ckpt-5.v2")["version"] == "C"


def test_local_path_of_a_stale_old_copy_restores_the_current_copy(tmp_path: Path):
    """Local disk: a replace whose last steps failed leaves ckpt-5 (new) and ckpt-5.old (old);
    restore(<root>/ckpt-5.old) gave the old state while restore("ckpt-5") gives the new one."""

    class FailingRmOld(LocalStorage):
        armed = False

        def fsync_dir(self, path: str) -> None:
            if self.armed and os.path.isdir(os.path.join(path, "ckpt-5.old")):
                self.armed = False
                raise OSError(errno.EIO, "injected failure after the second rename")
            super().fsync_dir(path)

    root = str(tmp_path / "ck")
    storage = FailingRmOld()
    cp = Checkpointer(root, storage=storage, keep_last=10, async_save=False)
    put(cp, "A", 5)
    storage.armed = True
    with pytest.raises(Exception, match="injected failure"):
        put(cp, "B", 5)
    assert sorted(os.listdir(root)) == ["ckpt-5", "ckpt-5.old"]
    reader = Checkpointer(root)
    assert reader.restore("ckpt-5")["version"] == "B"
    assert reader.restore(os.path.join(root, "ckpt-5.old"))["version"] == "B"
    assert reader.restore("ckpt-5.old")["version"] == "B"
    outside = tmp_path / "elsewhere" / "ckpt-5"  # a copy outside the root is read as it is
    os.makedirs(outside.parent)
    os.rename(os.path.join(root, "ckpt-5.old"), outside)
    assert reader.restore(str(outside))["version"] == "A"
