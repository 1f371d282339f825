"""The SDK's Checkpointer writing straight to s3:// (moto server on loopback)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from corral.sdk import Checkpointer, CheckpointWarning
from corral.sdk.storage import open_storage

from .conftest import Bucket


def state_for(step: int, n: int = 1000) -> dict:
    return {"w": np.arange(n, dtype=np.float64) * step, "step": step, "note": f"s{step}"}


def test_checkpoints_round_trip_through_s3_with_sha256_verification(bucket: Bucket) -> None:
    uri = bucket.uri("run-7")
    cp = Checkpointer(uri, keep_last=2)
    for step in (1, 2, 10):
        cp.save(state_for(step), step, metrics={"loss": 1.0 / step})
    cp.wait()
    assert bucket.list_keys("run-7/ckpt-10/") == [
        "run-7/ckpt-10/COMPLETE",
        "run-7/ckpt-10/state.pkl",
        "run-7/ckpt-10/tensors-00000.safetensors",
    ]
    assert {k.split("/")[1] for k in bucket.list_keys()} == {"ckpt-2", "ckpt-10"}  # retention
    manifest = json.loads(bucket.get("run-7/ckpt-10/COMPLETE"))
    assert manifest["step"] == 10 and set(manifest["files"]) == {
        "state.pkl",
        "tensors-00000.safetensors",
    }
    reader = Checkpointer(uri)
    latest = reader.latest()
    assert latest is not None and latest.step == 10 and latest.metrics == {"loss": 0.1}
    state = reader.restore()
    assert state["step"] == 10 and np.array_equal(state["w"], state_for(10)["w"])


def test_a_corrupted_object_is_detected_and_the_previous_checkpoint_used(bucket: Bucket) -> None:
    uri = bucket.uri("run")
    cp = Checkpointer(uri, keep_last=3, async_save=False)
    cp.save(state_for(1), 1)
    cp.save(state_for(2), 2)
    key = "run/ckpt-2/tensors-00000.safetensors"
    data = bytearray(bucket.get(key))
    data[-5] ^= 0xFF  # same size, one byte different: only the sha256 can tell
    bucket.put(key, bytes(data))
    with pytest.warns(CheckpointWarning, match="ckpt-2: tensors-00000.safetensors does not match"):
        state = Checkpointer(uri).restore()
    assert state["step"] == 1
    with pytest.warns(CheckpointWarning, match="ckpt-2"):
        assert Checkpointer(uri).latest().step == 1


def test_an_interrupted_upload_without_its_manifest_is_not_a_checkpoint(bucket: Bucket) -> None:
    uri = bucket.uri("run")
    Checkpointer(uri, async_save=False).save(state_for(1), 1)
    bucket.put("run/ckpt-5/state.pkl", b"half of a checkpoint")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Checkpointer(uri).restore()["step"] == 1
    assert any("ckpt-5 is incomplete" in str(w.message) for w in caught)
    Checkpointer(uri, async_save=False).save(state_for(2), 2)  # a writer cleans it up
    assert not [k for k in bucket.list_keys() if k.startswith("run/ckpt-5/")]


def test_a_big_tensor_file_goes_up_in_equal_parts_and_restores(bucket: Bucket) -> None:
    storage = open_storage(bucket.uri(), part_size=5 * 1024 * 1024)
    big = np.random.default_rng(0).random(12 * 1024 * 1024 // 8)  # 12 MiB: parts 5 + 5 + 2
    cp = Checkpointer(bucket.uri("big"), storage=storage, async_save=False)
    cp.save({"big": big}, 3)
    head = bucket.client.head_object(Bucket=bucket.name, Key="big/ckpt-3/tensors-00000.safetensors")
    assert head["ETag"].strip('"').endswith("-3")
    restored = Checkpointer(bucket.uri("big"), storage=storage).restore()
    assert np.array_equal(restored["big"], big)
