"""The agent's mirror sees a step re-saved on an object store (``ckpt-<step>.v<k>/``), cleans up
incomplete versions, and never deletes a complete new copy because deleting the old one failed.
Remote storages: S3 on the moto server, and a local directory used without renames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.agent import mirror
from corral.sdk import Checkpointer, LocalStorage
from corral.sdk.storage import resolve_location


class NonAtomicLocal(LocalStorage):
    atomic_rename = False


@pytest.fixture(params=["local", "s3"])
def remote(request, tmp_path: Path) -> tuple[Any, str]:
    if request.param == "local":
        root = tmp_path / "remote"
        root.mkdir()
        return NonAtomicLocal(), str(root)
    bucket = request.getfixturevalue("bucket")
    return resolve_location(bucket.uri("run-1"))


def local_checkpoint(directory: Path, step: int, value: float) -> mirror.Entry:
    """A fresh local checkpoint of ``step`` holding ``value`` (another version each call)."""
    cp = Checkpointer(str(directory), keep_last=100, async_save=False)
    cp.save({"w": np.full(8, value), "step": step}, step, metrics={"loss": value})
    local, _ = mirror.scan(LocalStorage(), str(directory))
    return next(e for e in local if e.step == step)


def test_a_step_uploaded_twice_is_still_listed_and_restored(remote, tmp_path: Path) -> None:
    storage, root = remote
    first = local_checkpoint(tmp_path / "a", 5, 1.0)
    second = local_checkpoint(tmp_path / "b", 5, 2.0)
    mirror.upload_checkpoint(first, storage, root)
    mirror.upload_checkpoint(second, storage, root)  # only ckpt-5.v1 is left remotely
    assert mirror.prefixes(storage, root) == ["ckpt"]
    complete, incomplete = mirror.scan(storage, root)
    assert [(e.step, e.digest) for e in complete] == [(5, second.digest)] and not incomplete
    target = tmp_path / "restored"
    target.mkdir()
    mirror.restore_checkpoint(complete[0], storage, str(target))
    state = Checkpointer(str(target)).restore()
    assert state["step"] == 5 and state["w"][0] == 2.0


def test_an_incomplete_version_older_than_the_newest_step_is_removed(remote, tmp_path) -> None:
    """A version left incomplete, with no complete copy of its step beside it (the upload of a
    re-saved step crashed after the old copy was gone), is a stale partial like any other."""
    storage, root = remote
    mirror.upload_checkpoint(local_checkpoint(tmp_path / "b", 5, 1.0), storage, root)
    partial = storage.join(root, "ckpt-3.v1")
    storage.makedirs(partial)
    storage.write_bytes(storage.join(partial, "state.pkl"), b"half an upload")
    assert mirror.remove_stale_partials(storage, root) == ["ckpt-3"]
    assert not storage.isfile(storage.join(partial, "state.pkl"))
    assert [e.step for e in mirror.scan(storage, root)[0]] == [5]


class Interrupting:
    """The remote storage, where deleting the old copy of a step is interrupted (Ctrl-C, or an
    exception the storage client does not map)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.atomic_rename = inner.atomic_rename
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in ("remove", "rmtree") and self.armed:

            def interrupted(*args: Any, **kwargs: Any) -> Any:
                self.armed = False
                raise KeyboardInterrupt

            return interrupted
        return attr


def test_an_interrupted_delete_of_the_old_copy_keeps_the_new_one(remote, tmp_path) -> None:
    storage, root = remote
    wrapped = Interrupting(storage)
    first = local_checkpoint(tmp_path / "a", 5, 1.0)
    second = local_checkpoint(tmp_path / "b", 5, 2.0)
    mirror.upload_checkpoint(first, wrapped, root)
    wrapped.armed = True
    with pytest.raises(KeyboardInterrupt):
        mirror.upload_checkpoint(second, wrapped, root)
    complete, _ = mirror.scan(storage, root)
    assert [(e.step, e.digest) for e in complete] == [(5, second.digest)]
