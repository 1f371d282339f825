"""CheckpointSync on its own: upload order, retention, corrupt files, waiting at the end, failures.
The "remote" here is a local directory (any Storage works), so faults are easy to inject."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np

from agent.helpers import make_plan
from corral.agent.checkpoint_sync import CheckpointSync
from corral.agent.events import EventLog
from corral.sdk import Checkpointer
from corral.sdk.storage import LocalStorage
from corral.storage.errors import StorageAccessDenied, StorageUnavailable
from support.waiting import wait_until


def setup(tmp_path: Path, *, storage=None, keep_last: int = 2, grace: float = 0.5, **kw):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "true"}],
        checkpoint_storage=str(tmp_path / "remote"),
        checkpoint_policy={"keep_last": keep_last},
        grace_seconds=grace,
    )
    Path(plan.checkpoint_dir).mkdir(parents=True)  # as the agent does
    events = EventLog(tmp_path / "events.jsonl")
    sync = CheckpointSync(plan, events, storage=storage, poll_seconds=0.02, **kw)
    return sync, events, plan


def save_local(directory: str, *steps: int) -> None:
    cp = Checkpointer(directory, keep_last=100, async_save=False)
    for step in steps:
        cp.save({"w": np.full(16, float(step)), "step": step}, step, metrics={"loss": 1 / step})


def of_type(events: EventLog, type_: str) -> list[dict]:
    return [e["data"] for e in events.after(0)[0] if e["type"] == type_]


def remote_names(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "remote" / "run-1").iterdir())


def test_uploads_go_newest_first_and_skip_what_retention_would_drop(tmp_path: Path) -> None:
    sync, events, plan = setup(tmp_path, keep_last=2)
    save_local(plan.checkpoint_dir, 1, 2, 3)
    assert sync.before_stages(None) is None
    assert sync.after_stages(None, "succeeded") is None
    assert [d["step"] for d in of_type(events, "checkpoint.uploaded")] == [3, 2]  # never 1
    assert remote_names(tmp_path) == ["ckpt-2", "ckpt-3"]
    save_local(plan.checkpoint_dir, 4)
    assert sync.after_stages(None, "succeeded") is None
    assert remote_names(tmp_path) == ["ckpt-3", "ckpt-4"]  # the job's retention, remotely
    state = Checkpointer(str(tmp_path / "remote" / "run-1")).restore()
    assert state["step"] == 4
    status = sync.status()["checkpoint_sync"]
    assert status["last_uploaded_step"] == 4 and status["pending"] == 0
    sync.close()


def test_a_corrupt_local_checkpoint_is_not_uploaded(tmp_path: Path) -> None:
    sync, events, plan = setup(tmp_path, keep_last=3)
    save_local(plan.checkpoint_dir, 1, 2)
    bad = Path(plan.checkpoint_dir) / "ckpt-2" / "state.pkl"
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0x01
    bad.write_bytes(bytes(data))
    sync.before_stages(None)
    assert sync.after_stages(None, "succeeded") is None  # the newest *valid* one is up
    skipped = of_type(events, "checkpoint.skipped")
    assert skipped[0]["name"] == "ckpt-2" and "does not match its manifest" in skipped[0]["reason"]
    assert remote_names(tmp_path) == ["ckpt-1"]  # no trace of ckpt-2, not even a .tmp
    sync.close()


def test_nothing_is_restored_or_sent_again_when_local_and_remote_agree(tmp_path: Path) -> None:
    sync, events, plan = setup(tmp_path, keep_last=3)
    save_local(plan.checkpoint_dir, 3, 5)
    remote = str(tmp_path / "remote" / "run-1")
    save_local(remote, 3, 5)
    stale = tmp_path / "remote" / "run-1" / "ckpt-4"  # an upload a crashed attempt left
    stale.mkdir()
    (stale / "state.pkl").write_bytes(b"partial")
    (Path(plan.checkpoint_dir) / "ckpt-5" / "COMPLETE").write_bytes(
        (Path(remote) / "ckpt-5" / "COMPLETE").read_bytes()  # the same checkpoint
    )
    (Path(plan.checkpoint_dir) / "ckpt-3" / "COMPLETE").write_bytes(
        (Path(remote) / "ckpt-3" / "COMPLETE").read_bytes()
    )
    sync.before_stages(None)
    assert sync.after_stages(None, "succeeded") is None
    assert of_type(events, "checkpoint.restored") == []
    assert of_type(events, "checkpoint.uploaded") == []
    assert remote_names(tmp_path) == ["ckpt-3", "ckpt-5"]
    sync.close()


class BlockingStorage(LocalStorage):
    """Holds every manifest write until released: an upload that takes long."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def write_bytes(self, path: str, data: bytes) -> None:
        if path.endswith("COMPLETE"):
            self.release.wait(10)
        super().write_bytes(path, data)


def test_a_stopped_attempt_waits_at_most_the_grace_period_for_its_upload(tmp_path: Path) -> None:
    storage = BlockingStorage()
    sync, _, plan = setup(tmp_path, storage=storage, grace=0.3)
    save_local(plan.checkpoint_dir, 1)
    sync.before_stages(None)
    wait_until(
        lambda: sync.status()["checkpoint_sync"]["uploading"] == "ckpt-1",
        5,
        0.01,
        "ckpt-1's upload",
    )
    began = time.monotonic()
    reason = sync.after_stages(None, "preempted")
    assert 0.25 < time.monotonic() - began < 3
    assert reason == "checkpoint ckpt-1 was not uploaded within the grace period (0.3 s)"
    storage.release.set()
    sync.close()


class FailingStorage(LocalStorage):
    def __init__(self, error: Exception) -> None:
        self.error, self.tries = error, 0

    def open_write(self, path: str):
        self.tries += 1
        raise self.error


def test_a_final_upload_that_cannot_succeed_fails_the_attempt_at_once(tmp_path: Path) -> None:
    denied = StorageAccessDenied(
        "write s3://b/run-1/ckpt-1/state.pkl: access denied (AccessDenied)"
    )
    storage = FailingStorage(denied)
    sync, events, plan = setup(tmp_path, storage=storage)
    save_local(plan.checkpoint_dir, 1)
    sync.before_stages(None)
    reason = sync.after_stages(None, "succeeded")
    assert reason == f"checkpoint upload failed: upload of ckpt-1 failed: {denied}"
    errors = of_type(events, "agent.error")
    assert len(errors) == 1 and errors[0]["hook"] == "checkpoint_sync"  # reported once
    assert sync.status()["checkpoint_sync"]["last_error"] == f"upload of ckpt-1 failed: {denied}"
    sync.close()


def test_a_final_upload_failing_for_a_passing_reason_is_tried_three_times(tmp_path: Path) -> None:
    storage = FailingStorage(StorageUnavailable("write s3://b/x: cannot reach the object store"))
    ticks = itertools.count(0, 100)  # a clock where every backoff has already passed
    sync, _, plan = setup(tmp_path, storage=storage, clock=lambda: float(next(ticks)))
    save_local(plan.checkpoint_dir, 1)
    sync.before_stages(None)
    assert "cannot reach the object store" in sync.after_stages(None, "succeeded")
    assert storage.tries >= 3
    sync.close()


def test_a_remote_manifest_naming_files_outside_its_checkpoint_is_refused(tmp_path: Path) -> None:
    import json

    sync, events, plan = setup(tmp_path)
    remote = tmp_path / "remote" / "run-1"
    save_local(str(remote), 1)
    manifest_path = remote / "ckpt-1" / "COMPLETE"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["../../evil"] = manifest["files"].pop("state.pkl")
    manifest_path.write_text(json.dumps(manifest))
    assert sync.before_stages(None) is None
    skipped = of_type(events, "checkpoint.skipped")
    assert (
        skipped[0]["name"] == "ckpt-1" and "invalid file name '../../evil'" in skipped[0]["reason"]
    )
    assert not (tmp_path / "evil").exists() and not list(Path(plan.checkpoint_dir).iterdir())
    sync.close()


def test_sharded_checkpoints_are_mirrored_retained_and_restored_whole(tmp_path: Path) -> None:
    """Every rank's files under one manifest: uploaded files first, COMPLETE last, retained and
    brought back like any checkpoint (one rank here; the format is the multi-rank one)."""
    import pytest

    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        sync, events, plan = setup(tmp_path, keep_last=2)
        cp = Checkpointer(plan.checkpoint_dir, keep_last=100, async_save=False)
        for step in (1, 2, 3):
            w = distribute_tensor(torch.full((4, 2), float(step)), mesh, [Shard(0)])
            cp.save({"w": w, "step": step}, step)
        assert sync.before_stages(None) is None
        assert sync.after_stages(None, "succeeded") is None
        uploaded = of_type(events, "checkpoint.uploaded")
        assert [(d["step"], d["shards"], d["files"]) for d in uploaded] == [(3, 1, 3), (2, 1, 3)]
        assert remote_names(tmp_path) == ["ckpt-2", "ckpt-3"]
        sync.close()
    finally:
        dist.destroy_process_group()
    # the next attempt, on an empty disk: restored from the bucket, then loaded whole
    (tmp_path / "next").mkdir()
    fresh, events2, plan2 = setup(tmp_path / "next", keep_last=2)
    fresh.root = str(tmp_path / "remote" / "run-1")
    assert fresh.before_stages(None) is None
    (restored,) = of_type(events2, "checkpoint.restored")
    assert restored["step"] == 3 and restored["shards"] == 1
    state = Checkpointer(plan2.checkpoint_dir).restore()
    assert torch.equal(state["w"], torch.full((4, 2), 3.0)) and state["step"] == 3
    fresh.close()
