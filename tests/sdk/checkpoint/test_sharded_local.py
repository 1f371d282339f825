"""Sharded checkpoints in one process (a gloo group of one rank, in this process): the format,
what readers and the agent's mirror make of it, corruption, and DCP interop. The multi-rank
behaviour is in test_sharded.py."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, LocalStorage
from corral.sdk.checkpoint import CheckpointWarning

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Shard, distribute_tensor  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def group():
    """A process group of one rank (DTensors need one); destroyed afterwards."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def state_for(mesh, step: int) -> dict:
    w = torch.arange(12, dtype=torch.float32).reshape(4, 3) + step
    return {
        "model": {"w": distribute_tensor(w, mesh, [Shard(0)]), "plain": torch.ones(2) * step},
        "step": step,
    }


def test_a_one_rank_sharded_save_is_format_2_and_reads_like_any_checkpoint(
    group, tmp_path, monkeypatch
):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    cp = Checkpointer(tmp_path / "ck", keep_last=2)
    for step in (1, 2, 3):
        cp.save(state_for(group, step), step, metrics={"loss": float("nan")})
    cp.wait()
    assert cp.sharded and sorted(os.listdir(tmp_path / "ck")) == ["ckpt-2", "ckpt-3"]
    manifest = json.loads((tmp_path / "ck" / "ckpt-3" / "COMPLETE").read_text())
    assert (manifest["format_version"], manifest["world_size"]) == (2, 1)
    assert manifest["metrics"] == {"loss": "nan"}
    info = cp.latest()
    assert info is not None and (info.step, info.world_size, info.format_version) == (3, 1, 2)
    record = json.loads(progress.read_text().splitlines()[-1])
    assert record["kind"] == "checkpoint" and record["shards"] == 1 and record["step"] == 3

    template = state_for(group, 0)
    state = cp.restore(template=template)
    assert isinstance(state["model"]["w"], DTensor)
    assert torch.equal(
        state["model"]["w"].full_tensor(), state_for(group, 3)["model"]["w"].full_tensor()
    )
    whole = cp.restore()
    assert type(whole["model"]["w"]) is torch.Tensor
    assert torch.equal(whole["model"]["plain"], torch.ones(2) * 3) and whole["step"] == 3


def test_a_corrupt_shard_file_makes_restore_fall_back(group, tmp_path):
    cp = Checkpointer(tmp_path / "ck")
    cp.save(state_for(group, 1), 1)
    cp.save(state_for(group, 2), 2)
    cp.wait()
    target = tmp_path / "ck" / "ckpt-2" / "r00000-tensors-00000.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="ckpt-2: r00000-tensors-00000.safetensors does"):
        state = Checkpointer(tmp_path / "ck").restore()
    assert state["step"] == 1


def test_a_checkpoint_of_full_tensors_reshards_into_a_template(group, tmp_path):
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"model": {"w": state_for(group, 5)["model"]["w"].full_tensor()}}, 5)  # one process
    cp.wait()
    state = cp.restore(template=state_for(group, 0))
    assert isinstance(state["model"]["w"], DTensor)
    assert torch.equal(
        state["model"]["w"].full_tensor(), state_for(group, 5)["model"]["w"].full_tensor()
    )


def test_the_agents_mirror_uploads_and_restores_a_sharded_checkpoint(group, tmp_path):
    from corral.agent import mirror

    cp = Checkpointer(tmp_path / "local")
    cp.save(state_for(group, 7), 7)
    cp.wait()
    local = LocalStorage()
    (entry,), _ = mirror.scan(local, str(tmp_path / "local"))
    assert entry.manifest.world_size == 1
    remote = str(tmp_path / "bucket" / "run-1")
    assert mirror.upload_checkpoint(entry, local, remote) == entry.size_bytes
    (up,), _ = mirror.scan(local, remote)
    assert set(up.manifest.files) == set(entry.manifest.files)
    mirror.restore_checkpoint(up, local, str(tmp_path / "fresh"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = Checkpointer(tmp_path / "fresh").restore()
    assert torch.equal(state["model"]["w"], state_for(group, 7)["model"]["w"].full_tensor())


def test_dcp_interop_read_a_dcp_checkpoint_and_write_one_on_request(group, tmp_path):
    import torch.distributed.checkpoint as torch_dcp

    from corral.sdk import dcp

    # a checkpoint DCP wrote is read whole, or into a template (resharding as DCP does)
    torch_dcp.save(state_for(group, 4), checkpoint_id=str(tmp_path / "by-dcp"))
    assert dcp.is_dcp_checkpoint(tmp_path / "by-dcp")
    whole = Checkpointer(tmp_path / "ck").restore(tmp_path / "by-dcp")
    assert torch.equal(whole["model"]["w"], state_for(group, 4)["model"]["w"].full_tensor())
    assert whole["step"] == 4
    into = dcp.load_dcp(tmp_path / "by-dcp", template=state_for(group, 0))
    assert torch.equal(into["model"]["w"].full_tensor(), whole["model"]["w"])

    # a corral checkpoint written out as DCP, which DCP's own loader reads
    cp = Checkpointer(tmp_path / "ck")
    cp.save(state_for(group, 9), 9)
    cp.wait()
    dcp.export_dcp(cp, tmp_path / "to-dcp", template=state_for(group, 0))
    loaded = state_for(group, 0)
    torch_dcp.load(loaded, checkpoint_id=str(tmp_path / "to-dcp"))
    assert torch.equal(
        loaded["model"]["w"].full_tensor(), state_for(group, 9)["model"]["w"].full_tensor()
    )
    assert torch.equal(loaded["model"]["plain"], torch.ones(2) * 9)


def test_not_a_dcp_directory_is_a_clear_error(tmp_path: Path):
    from corral.errors import BadInput
    from corral.sdk import dcp

    with pytest.raises(BadInput, match=r"not a torch\.distributed\.checkpoint directory"):
        dcp.load_dcp(tmp_path)


def test_a_template_of_another_shape_is_a_clear_error(group, tmp_path):
    from corral.sdk.manifest import CheckpointLoadError

    cp = Checkpointer(tmp_path / "ck")
    cp.save(state_for(group, 1), 1)
    cp.wait()
    wrong = {"model": {"w": distribute_tensor(torch.zeros(5, 3), group, [Shard(0)])}}
    with pytest.raises(CheckpointLoadError, match=r"'model\.w' was saved with shape \[4, 3\]"):
        cp.restore(template=wrong)


def test_on_an_object_store_a_sharded_resave_keeps_the_old_copy_until_the_new_is_complete(
    group, tmp_path
):
    """No atomic rename (s3://): every rank writes in place, COMPLETE last; a re-saved step goes
    to ckpt-<step>.v1 and the old copy is deleted only once the new one is complete."""
    from .test_object_store_resave import NonAtomicLocal

    cp = Checkpointer(tmp_path / "ck", storage=NonAtomicLocal(), keep_last=2)
    cp.save(state_for(group, 1), 1)
    cp.save(state_for(group, 2), 2)
    cp.save(state_for(group, 2), 2)  # a re-save of step 2
    cp.wait()
    assert sorted(os.listdir(tmp_path / "ck")) == ["ckpt-1", "ckpt-2.v1"]
    state = Checkpointer(tmp_path / "ck", storage=NonAtomicLocal()).restore()
    assert state["step"] == 2 and torch.equal(
        state["model"]["w"], state_for(group, 2)["model"]["w"].full_tensor()
    )
