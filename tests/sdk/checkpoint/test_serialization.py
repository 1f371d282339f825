"""What a state can hold, and that a save captures it at save() time."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from corral.sdk import Checkpointer, CheckpointError, LocalStorage

pytestmark = pytest.mark.torch

TORCH_DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.float8_e4m3fn,
]


def roundtrip(tmp_path: Path, state, **kw):
    cp = Checkpointer(tmp_path / "ck", **kw)
    cp.save(state, 1)
    cp.wait()
    return Checkpointer(tmp_path / "ck").restore()


def test_torch_tensors_of_every_supported_dtype_round_trip_bitwise(tmp_path: Path):
    g = torch.Generator().manual_seed(0)
    state = {}
    for dtype in TORCH_DTYPES:
        raw = torch.randint(0, 256, (3, 5), dtype=torch.uint8, generator=g)
        width = torch.empty((), dtype=dtype).element_size()
        if dtype == torch.bool:
            raw = raw % 2  # only 0 and 1 are valid bools
        state[str(dtype)] = raw.repeat(1, width).view(dtype)  # arbitrary bit patterns
    state["scalar"] = torch.tensor(2.5)
    state["empty"] = torch.empty(0, 7)
    state["strided"] = torch.arange(24.0).reshape(4, 6).t()  # not contiguous
    out = roundtrip(tmp_path, state)
    for key, value in state.items():
        assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
        got, want = out[key].reshape(-1), value.contiguous().reshape(-1)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), key


def test_numpy_arrays_and_plain_python_round_trip(tmp_path: Path):
    state = {
        "f16": np.arange(7, dtype=np.float16),
        "i64": np.arange(-3, 3, dtype=np.int64).reshape(2, 3),
        "u32": np.array([1, 2**32 - 1], dtype=np.uint32),
        "b": np.array([True, False]),
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "big_endian": np.arange(3, dtype=">i4"),  # pickled with the rest
        "objects": np.array([{"a": 1}, None], dtype=object),
        "plain": {"tuple": (1, 2.5, "x"), "set": {3, 4}, "bytes": b"\x00\xff", "none": None},
    }
    out = roundtrip(tmp_path, state)
    for key in ("f16", "i64", "u32", "b", "fortran", "big_endian"):
        assert out[key].dtype == state[key].dtype
        assert np.array_equal(out[key], state[key])
    assert list(out["objects"]) == [{"a": 1}, None]
    assert out["plain"] == state["plain"]


def test_parameters_requires_grad_and_shared_references_survive(tmp_path: Path):
    shared = torch.ones(3)
    p = torch.nn.Parameter(torch.zeros(2))
    state = {"a": shared, "b": [shared], "p": p, "frozen": torch.nn.Parameter(torch.ones(1), False)}
    out = roundtrip(tmp_path, state)
    assert out["a"] is out["b"][0]
    assert isinstance(out["p"], torch.nn.Parameter) and out["p"].requires_grad
    assert isinstance(out["frozen"], torch.nn.Parameter) and not out["frozen"].requires_grad


def test_unsupported_tensor_layouts_are_pickled_and_still_round_trip(tmp_path: Path):
    sparse = torch.sparse_coo_tensor(
        torch.tensor([[0, 2]]), torch.tensor([1.0, 5.0]), (4,), check_invariants=True
    )
    state = {"sparse": sparse, "c128": torch.tensor([1 + 2j], dtype=torch.complex128)}
    out = roundtrip(tmp_path, state)
    assert torch.equal(out["sparse"].to_dense(), sparse.to_dense())
    assert torch.equal(out["c128"], state["c128"])


def test_model_and_optimizer_state_dicts_load_back(tmp_path: Path):
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(3, 5)).sum().backward()
    opt.step()
    out = roundtrip(tmp_path, {"model": model.state_dict(), "opt": opt.state_dict()})
    model2 = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.01)
    model2.load_state_dict(out["model"])
    opt2.load_state_dict(out["opt"])
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(
        opt.state_dict()["state"][0]["exp_avg"], opt2.state_dict()["state"][0]["exp_avg"]
    )


@pytest.mark.parametrize("async_save", [True, False])
def test_state_changed_after_save_returns_is_not_in_the_checkpoint(tmp_path: Path, async_save):
    w = torch.zeros(1000)
    arr = np.zeros(10)
    meta = {"epoch": 1}
    cp = Checkpointer(tmp_path / "ck", async_save=async_save)
    cp.save({"w": w, "arr": arr, "meta": meta}, 1)
    w.add_(1)  # the training loop moves on immediately
    arr += 1
    meta["epoch"] = 2
    cp.wait()
    out = cp.restore()
    assert torch.all(out["w"] == 0) and np.all(out["arr"] == 0) and out["meta"]["epoch"] == 1


def test_snapshot_buffers_are_reused_between_saves(tmp_path: Path):
    w = torch.zeros(4096)
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"w": w}, 1)
    cp.wait()
    first = cp._pool._slots[0].data_ptr()
    w.add_(1)
    cp.save({"w": w}, 2)
    cp.wait()
    assert cp._pool._slots[0].data_ptr() == first
    assert torch.all(cp.restore()["w"] == 1)


def test_tensors_file_is_readable_by_the_safetensors_library(tmp_path: Path):
    from safetensors.numpy import load_file as load_np
    from safetensors.torch import load_file

    model = torch.nn.Linear(3, 2)
    cp = Checkpointer(tmp_path / "ck", async_save=False)
    cp.save({"model": model.state_dict(), "extra": np.arange(3, dtype=np.int32)}, 1)
    tensors = load_file(tmp_path / "ck" / "ckpt-1" / "tensors-00000.safetensors")
    assert set(tensors) == {"model.weight", "model.bias", "extra"}
    assert torch.equal(tensors["model.weight"], model.weight.detach())
    cp.save({"a": np.ones((2, 2), dtype=np.float32)}, 2)
    assert np.array_equal(
        load_np(tmp_path / "ck" / "ckpt-2" / "tensors-00000.safetensors")["a"], np.ones((2, 2))
    )


def test_restore_can_map_tensors_to_a_device(tmp_path: Path):
    out = Checkpointer(tmp_path / "ck")
    out.save({"w": torch.ones(2)}, 1)
    assert out.restore(map_location=torch.device("cpu"))["w"].device.type == "cpu"
    assert out.restore(map_location="meta")["w"].device.type == "meta"


def test_sdk_checkpoints_work_without_torch_and_never_import_it(tmp_path: Path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # importing torch now fails, like an environment without it
        import numpy as np
        from corral.sdk import Checkpointer, training_state, restore_training_state
        cp = Checkpointer({str(tmp_path / "ck")!r}, keep_last=2)
        model = {{"w": np.arange(6.0)}}
        for step in range(3):
            model["w"] += 1
            cp.save(training_state(model, step=step), step, {{"loss": 1.0}})
        cp.wait()
        fresh = {{"w": np.zeros(6)}}
        info = restore_training_state(cp.restore(), fresh)
        assert info["step"] == 2 and np.array_equal(fresh["w"], np.arange(6.0) + 3), fresh
        print("ok", sorted(p for p in __import__("os").listdir({str(tmp_path / "ck")!r})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok ['ckpt-1', 'ckpt-2']"


def test_importing_the_sdk_checkpoint_modules_does_not_import_torch():
    code = (
        "import sys, corral.sdk as s; s.Checkpointer; s.training_state; s.CostMeter;"
        " s.exit_if_preempted; s.select_to_keep; print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_large_states_are_split_into_several_verified_tensor_files(tmp_path: Path, monkeypatch):
    from corral.sdk import serialize

    monkeypatch.setattr(serialize, "SHARD_BYTES", 64 * 1024)
    state = {f"w{i}": torch.full((10_000,), float(i)) for i in range(8)}  # 40 KB each
    state["small"] = np.arange(10, dtype=np.int16)
    out = roundtrip(tmp_path, state)
    for key, value in state.items():
        assert (np.array_equal if key == "small" else torch.equal)(out[key], value)
    files = sorted(p.name for p in (tmp_path / "ck" / "ckpt-1").iterdir())
    assert files[-1] == "tensors-00007.safetensors" and "state.pkl" in files  # one per 40 KB
    data = bytearray((tmp_path / "ck" / "ckpt-1" / "tensors-00003.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "ck" / "ckpt-1" / "tensors-00003.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"tensors-00003.safetensors does not match"):
        Checkpointer(tmp_path / "ck").restore("ckpt-1")


def test_parallel_chunked_snapshot_copies_are_exact(tmp_path: Path, monkeypatch):
    from corral.sdk import staging

    monkeypatch.setattr(staging, "PARALLEL_COPY_BYTES", 0)
    monkeypatch.setattr(staging, "COPY_CHUNK_BYTES", 4096 + 8)  # chunks not aligned to anything
    g = torch.Generator().manual_seed(1)
    state = {"a": torch.randn(50_001, generator=g), "b": np.random.default_rng(2).random(9_999)}
    expected = {"a": state["a"].clone(), "b": state["b"].copy()}
    cp = Checkpointer(tmp_path / "ck")
    cp.save(state, 1)
    state["a"].zero_()
    state["b"][:] = 0
    cp.wait()
    out = cp.restore()
    assert torch.equal(out["a"], expected["a"]) and np.array_equal(out["b"], expected["b"])


class NoMapStorage(LocalStorage):
    """A storage without the optional map_file capability: restore reads into memory."""

    map_file = None


def test_restore_without_memory_mapping_reads_and_verifies(tmp_path: Path):
    state = {"w": torch.arange(1000.0), "n": np.ones(3)}
    cp = Checkpointer(str(tmp_path / "ck"), storage=NoMapStorage())
    cp.save(state, 1)
    cp.wait()
    out = cp.restore()
    assert torch.equal(out["w"], state["w"]) and np.array_equal(out["n"], state["n"])
    out["w"] += 1  # restored tensors are writable
    target = tmp_path / "ck" / "ckpt-1" / "tensors-00000.safetensors"
    data = bytearray(target.read_bytes())
    data[100] ^= 1
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its sha256"):
        Checkpointer(str(tmp_path / "ck"), storage=NoMapStorage()).restore("ckpt-1")


def test_restored_tensors_are_private_copies_of_the_mapped_file(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"w": torch.zeros(4096)}, 1)
    cp.wait()
    first = cp.restore()
    first["w"] += 7  # copy-on-write: the file and later restores are unaffected
    assert torch.all(cp.restore()["w"] == 0)
    assert Checkpointer(tmp_path / "ck").latest().step == 1  # still verifies


@dataclasses.dataclass
class Holder:
    x: object


def test_a_tensor_inside_an_object_never_shares_a_name_with_a_named_one(tmp_path: Path):
    """Tensors held by objects get generated names; one that equals a dotted path in the state
    would make both restore as the same tensor."""
    state = {
        "obj": Holder(np.full(3, 1.0)),
        "t": Holder(torch.ones(2)),
        "_unnamed": {"0": np.full(5, 2.0), "1": torch.zeros(4)},
    }
    out = roundtrip(tmp_path, state)
    assert np.array_equal(out["obj"].x, np.full(3, 1.0))
    assert torch.equal(out["t"].x, torch.ones(2))
    assert np.array_equal(out["_unnamed"]["0"], np.full(5, 2.0))
    assert torch.equal(out["_unnamed"]["1"], torch.zeros(4))
