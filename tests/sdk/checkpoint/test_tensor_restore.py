"""Review of the save/restore core: states a user hits that used to lose or break a checkpoint."""

from __future__ import annotations

import errno
import gc
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from corral.sdk import Checkpointer, CheckpointLoadError
from corral.sdk.serialize import _Entry, _header, _shard

pytestmark = pytest.mark.torch

# dtypes torch's own pickle saves but cannot load back (or cannot save at all)
UNPICKLABLE_DTYPES = [
    getattr(torch, name)
    for name in (
        "complex32",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
        "bits16",
        "bits8",
        "uint4",
        "int2",
    )
    if hasattr(torch, name)
]


def roundtrip(tmp_path: Path, state, *, async_save=True, **restore):
    cp = Checkpointer(tmp_path / "ck", async_save=async_save)
    cp.save(state, 1)
    cp.wait()
    return Checkpointer(tmp_path / "ck").restore(**restore)


def _bits(t: torch.Tensor) -> torch.Tensor:
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()])


@pytest.mark.parametrize("async_save", [True, False])
def test_tensors_of_dtypes_torch_cannot_pickle_restore_bitwise(tmp_path: Path, async_save):
    """complex32, the fnuz/e8m0 float8s, float4 and the bits/sub-byte dtypes: torch pickles some
    of them but cannot unpickle them, so the checkpoint saved and then never restored."""
    g = torch.Generator().manual_seed(0)
    state, shared = {}, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        for dtype in UNPICKLABLE_DTYPES:
            width = torch.empty((), dtype=dtype).element_size()
            raw = torch.randint(0, 256, (4, 6 * width), dtype=torch.uint8, generator=g)
            state[str(dtype)] = raw.view(dtype)
        state["transposed"] = state[str(UNPICKLABLE_DTYPES[1])].t()
        state["frozen"] = torch.nn.Parameter(state[str(UNPICKLABLE_DTYPES[1])].clone(), False)
        shared = state[str(UNPICKLABLE_DTYPES[0])]
        state["again"] = [shared]
        before = {k: _bits(v).clone() for k, v in state.items() if isinstance(v, torch.Tensor)}
        out = roundtrip(tmp_path, state, async_save=async_save)
    for key, want in before.items():
        got = out[key]
        assert got.dtype == state[key].dtype and got.shape == state[key].shape, key
        assert torch.equal(_bits(got), want), key
    assert isinstance(out["frozen"], torch.nn.Parameter) and not out["frozen"].requires_grad
    assert out["again"][0] is out[str(UNPICKLABLE_DTYPES[0])]


def test_a_tensor_of_an_unpicklable_dtype_changed_after_save_is_not_in_the_checkpoint(
    tmp_path: Path,
):
    w = torch.zeros(64, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"w": w}, 1)
    w.view(torch.uint8).add_(3)
    cp.wait()
    assert torch.all(cp.restore()["w"].view(torch.uint8) == 0)


def _many_files_checkpoint(directory: Path, files: int) -> None:
    script = textwrap.dedent(
        f"""
        import numpy as np
        import corral.sdk.serialize as ser
        from corral.sdk import Checkpointer
        ser.SHARD_BYTES = 1024
        cp = Checkpointer({str(directory)!r}, keep_last=5)
        for step in (1, 2):
            cp.save({{f"a{{i}}": np.full(256, i + step, np.float32) for i in range({files})}}, step)
        cp.wait()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_restoring_more_tensor_files_than_the_open_file_limit(tmp_path: Path):
    """A large model has hundreds of 128 MiB tensor files; each memory map kept a file
    descriptor open, so restore hit EMFILE, skipped every checkpoint as unreadable and returned
    None: a silent fresh start."""
    _many_files_checkpoint(tmp_path / "ck", 120)
    assert len(os.listdir(tmp_path / "ck" / "ckpt-2")) > 100
    script = textwrap.dedent(
        f"""
        import resource, warnings
        import numpy as np
        from corral.sdk import Checkpointer
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        warnings.simplefilter("error")
        out = Checkpointer({str(tmp_path / "ck")!r}).restore()
        assert out is not None and len(out) == 120, out
        assert all(np.all(out[f"a{{i}}"] == i + 2) for i in range(120))
        again = [Checkpointer({str(tmp_path / "ck")!r}).restore() for _ in range(3)]
        assert all(np.all(s["a7"] == 9) for s in again)
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_running_out_of_file_descriptors_is_a_load_error_not_a_fallback(tmp_path, monkeypatch):
    cp = Checkpointer(tmp_path / "ck", keep_last=5, async_save=False)
    cp.save({"w": np.zeros(4)}, 1)
    cp.save({"w": np.ones(4)}, 2)
    reader = Checkpointer(tmp_path / "ck")

    def map_file(path: str):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(reader.storage, "map_file", map_file)
    with pytest.raises(CheckpointLoadError, match=r"ckpt-2: cannot be read.*Too many open files"):
        reader.restore()


def test_restored_tensors_outlive_their_deleted_checkpoint_and_stay_private(tmp_path: Path):
    cp = Checkpointer(tmp_path / "ck", keep_last=1)
    cp.save({"t": torch.arange(5000.0), "n": np.arange(5000.0), "big": torch.ones(3, 1 << 16)}, 1)
    cp.wait()
    out = cp.restore()
    cp.save({"t": torch.zeros(1)}, 2)  # retention deletes ckpt-1
    cp.wait()
    assert not (tmp_path / "ck" / "ckpt-1").exists()
    shutil.rmtree(tmp_path / "ck")
    gc.collect()
    out["t"] += 1
    out["n"] += 1
    assert float(out["t"].sum()) == sum(range(1, 5001)) and out["n"].sum() == sum(range(1, 5001))
    assert float(out["big"].sum()) == 3 * (1 << 16)
    view = out["big"][1]
    del out
    gc.collect()
    assert float(view.sum()) == 1 << 16  # a view keeps the mapping alive


@pytest.mark.parametrize(
    "map_location",
    [
        "cpu",
        torch.device("cpu"),
        None,
        {"cuda:0": "cpu"},
        {"cpu": "cpu"},
        lambda storage, location: storage,
        lambda storage, location: None,
    ],
    ids=["str", "device", "none", "dict-other", "dict-cpu", "fn-storage", "fn-none"],
)
def test_restore_accepts_the_map_location_forms_of_torch_load(tmp_path: Path, map_location):
    state = {"t": torch.arange(6.0), "p": torch.nn.Parameter(torch.ones(2)), "n": np.ones(2)}
    out = roundtrip(tmp_path, state, map_location=map_location)
    assert out["t"].device.type == "cpu" and torch.equal(out["t"], state["t"])
    assert isinstance(out["p"], torch.nn.Parameter) and out["p"].requires_grad
    assert np.array_equal(out["n"], state["n"])


def test_a_map_location_function_sees_each_tensor_alone_and_chooses_its_device(tmp_path: Path):
    seen = []

    def to_meta(storage, location):
        seen.append((storage.nbytes(), location))
        return torch.UntypedStorage(storage.nbytes(), device="meta")

    state = {"a": torch.ones(3), "b": torch.zeros(2, 5, dtype=torch.float64)}
    out = roundtrip(tmp_path, state, map_location=to_meta)
    assert sorted(seen) == [(12, "cpu"), (80, "cpu")]
    assert out["a"].device.type == "meta" and out["b"].shape == (2, 5)
    out = roundtrip(tmp_path / "2", state, map_location={"cpu": "meta"})
    assert out["b"].device.type == "meta"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("map_location", ["cuda", "cuda:1", torch.device("cuda")])
def test_restoring_to_cuda_without_cuda_is_a_clear_load_error(tmp_path: Path, map_location):
    with pytest.raises(CheckpointLoadError, match=r"ckpt-1: .*CUDA is not available.*'cpu'"):
        roundtrip(tmp_path, {"t": torch.ones(2)}, map_location=map_location)
    # a checkpoint without torch tensors needs no device
    assert roundtrip(tmp_path / "2", {"n": np.ones(2)}, map_location=map_location)["n"].sum() == 2


@pytest.mark.parametrize("map_location", ["nowhere", 3, {"cpu": "nowhere"}])
def test_an_invalid_map_location_is_a_load_error_naming_it(tmp_path: Path, map_location):
    with pytest.raises(CheckpointLoadError, match=r"ckpt-1: .*map_location"):
        roundtrip(tmp_path, {"t": torch.ones(2)}, map_location=map_location)


def test_offsets_beyond_4_gib_are_computed_exactly():
    """The arithmetic of large shards, without allocating them."""

    def fake(name, nbytes, itemsize):
        return _Entry(
            name,
            "torch",
            "F32" if itemsize == 4 else "U8",
            (nbytes // itemsize,),
            None,
            itemsize,
            nbytes,
        )

    big = [fake("a", 3 << 30, 4), fake("b", 3 << 30, 4), fake("c", 5, 1)]
    shards = _shard(big)
    assert [[e.name for e in s] for s in shards] == [["a"], ["b"], ["c"]]
    import json

    raw = _header([fake("x", 3 << 30, 4), fake("y", (3 << 30) + 8, 4), fake("z", 1, 1)])
    header = json.loads(raw[8:])
    assert header["y"]["data_offsets"] == [3 << 30, (6 << 30) + 8]
    assert header["z"]["data_offsets"] == [(6 << 30) + 8, (6 << 30) + 9]
    assert (len(raw) - 8) % 8 == 0 == len(raw) % 8


@pytest.mark.parametrize("make", [lambda i: torch.full((3,), float(i)), lambda i: np.full(3, i)])
def test_ten_thousand_tiny_tensors_save_and_restore_quickly(tmp_path: Path, make):
    """Per-object costs: a generous bound (about 0.6 s each way on the reference machine) that
    catches anything quadratic, or a per-tensor cost of milliseconds."""
    import time

    state = {f"layer{i}": make(i) for i in range(10_000)}
    cp = Checkpointer(tmp_path / "ck")
    started = time.perf_counter()
    cp.save(state, 1)
    cp.wait()
    saved = time.perf_counter()
    out = Checkpointer(tmp_path / "ck").restore()
    restored = time.perf_counter()
    assert all(out[k].tolist() == v.tolist() for k, v in state.items())
    assert saved - started < 3.0 and restored - saved < 3.0, (saved - started, restored - saved)
