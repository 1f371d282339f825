"""The agent's checkpoint sync end to end: an in-process agent, a real stage using the SDK, and
a moto S3 server on loopback."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from agent.helpers import make_plan
from corral.sdk import Checkpointer

from .conftest import Bucket, assert_no_secret

TRAIN = """\
import os
import numpy as np
from corral.sdk import Checkpointer

cp = Checkpointer()
state = cp.restore()
start = state["step"] if state else 0
with open("started_from.txt", "a") as f:
    f.write(f"{start}\\n")
for step in range(start + 1, start + 1 + int(os.environ["STEPS"])):
    cp.save({"w": np.full(64, float(step)), "step": step}, step, metrics={"loss": 1 / step})
cp.wait()
"""


def plan_for(tmp_path: Path, storage: str, attempt: int, steps: int):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(TRAIN)
    return make_plan(
        tmp_path,
        [{"name": "train", "run": f"{sys.executable} train.py"}],
        attempt=attempt,
        checkpoint_dir=str(tmp_path / f"ckpt-a{attempt}"),  # a new machine: empty
        state_dir=str(tmp_path / f"state-a{attempt}"),
        checkpoint_storage=storage,
        env={"STEPS": str(steps)},
        checkpoint_policy={"keep_last": 2},
    )


def started_from(tmp_path: Path) -> list[int]:
    return [int(x) for x in (tmp_path / "work" / "started_from.txt").read_text().split()]


def seq_of(events: list[dict], type_: str) -> int:
    return next(e["seq"] for e in events if e["type"] == type_)


def test_checkpoints_reach_the_bucket_and_the_next_attempt_resumes_from_them(
    bucket: Bucket, tmp_path: Path, start_agent
) -> None:
    storage = bucket.uri("ckpts")
    first = start_agent(plan_for(tmp_path, storage, attempt=1, steps=4))
    status = first.wait_finished(timeout=60)
    assert status["phase"] == "succeeded", status
    sync = status["checkpoint_sync"]
    assert sync["uri"] == f"{storage}/run-1" and sync["last_uploaded_step"] == 4
    assert sync["pending"] == 0 and sync["last_error"] is None
    assert {k.split("/")[2] for k in bucket.list_keys("ckpts/run-1/")} == {"ckpt-3", "ckpt-4"}
    uploaded = {
        e["data"]["step"]: e["data"] for e in first.events() if e["type"] == "checkpoint.uploaded"
    }
    assert uploaded[4]["uri"] == f"{storage}/run-1/ckpt-4" and uploaded[4]["files"] == 2

    second = start_agent(plan_for(tmp_path, storage, attempt=2, steps=2))
    status = second.wait_finished(timeout=60)
    assert status["phase"] == "succeeded", status
    events = second.events()
    restored = next(e["data"] for e in events if e["type"] == "checkpoint.restored")
    assert restored["step"] == 4 and restored["uri"] == f"{storage}/run-1/ckpt-4"
    assert seq_of(events, "checkpoint.restored") < seq_of(events, "stage.started")
    assert started_from(tmp_path) == [0, 4]
    assert status["checkpoint_sync"]["restored_step"] == 4
    assert {k.split("/")[2] for k in bucket.list_keys("ckpts/run-1/")} == {"ckpt-5", "ckpt-6"}

    # no credential in events, status or logs (the stage itself does get them in its env)
    for state in ("state-a1", "state-a2"):
        for path in (tmp_path / state).rglob("*"):
            if path.is_file():
                assert_no_secret(path.read_text(errors="replace"))
    assert_no_secret(json.dumps(status))


def test_a_corrupt_newest_remote_checkpoint_is_skipped_and_the_previous_restored(
    bucket: Bucket, tmp_path: Path, start_agent
) -> None:
    storage = bucket.uri("ckpts")
    earlier = Checkpointer(f"{storage}/run-1", async_save=False)  # what an earlier attempt left
    for step in (1, 2):
        earlier.save({"w": np.full(64, float(step)), "step": step}, step)
    key = "ckpts/run-1/ckpt-2/state.pkl"
    data = bytearray(bucket.get(key))
    data[len(data) // 2] ^= 0x01
    bucket.put(key, bytes(data))

    client = start_agent(plan_for(tmp_path, storage, attempt=2, steps=1))
    status = client.wait_finished(timeout=60)
    assert status["phase"] == "succeeded", status
    events = client.events()
    skipped = next(e["data"] for e in events if e["type"] == "checkpoint.skipped")
    assert skipped["step"] == 2 and "state.pkl does not match its sha256" in skipped["reason"]
    restored = next(e["data"] for e in events if e["type"] == "checkpoint.restored")
    assert restored["step"] == 1
    assert started_from(tmp_path) == [1]
    assert sorted(p.name for p in (tmp_path / "ckpt-a2").iterdir()) == ["ckpt-1", "ckpt-2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the corrupt copy was replaced by the new step 2
        assert Checkpointer(f"{storage}/run-1").restore()["step"] == 2


def test_a_missing_bucket_fails_the_attempt_before_its_stage(
    s3_env: str, tmp_path: Path, start_agent
) -> None:
    plan = plan_for(tmp_path, "s3://corral-missing-bucket/ckpts", attempt=1, steps=1)
    client = start_agent(plan)
    status = client.wait_finished(timeout=30)
    assert status["phase"] == "failed"
    assert status["reason"].startswith("checkpoint storage: list s3://corral-missing-bucket/")
    assert "bucket 'corral-missing-bucket' does not exist" in status["reason"]
    assert "\n" not in status["reason"]
    assert_no_secret(json.dumps(status) + json.dumps(client.events()))
    assert not (tmp_path / "work" / "started_from.txt").exists()


@pytest.mark.parametrize("uri", ["gs://bucket/x", "s3:///no-bucket"])
def test_an_unusable_storage_uri_fails_the_attempt_with_its_reason(
    s3_env: str, tmp_path: Path, start_agent, uri: str
) -> None:
    plan = plan_for(tmp_path, uri, attempt=1, steps=1)
    status = start_agent(plan).wait_finished(timeout=30)
    assert status["phase"] == "failed" and status["reason"].startswith("checkpoint storage:")
