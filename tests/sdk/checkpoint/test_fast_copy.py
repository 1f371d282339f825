"""The snapshot copy: the streaming-store extension copies exactly what memmove copies."""

from __future__ import annotations

import ctypes
import platform
import random
import shutil
import sys
import sysconfig

import pytest

from corral.sdk import staging


def _kinds() -> list[str]:
    kinds = ["memmove"]
    if staging._fast_copy is not None:
        kinds.append(staging._FAST_KIND)
    return kinds


def test_the_extension_is_built_where_a_compiler_was_available():
    """CI installs with a C compiler on x86-64 Linux: the fast path must not be lost silently."""
    on_x86_linux = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
    if not (on_x86_linux and shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0])):
        pytest.skip("no C compiler on x86-64 Linux here: the memmove fallback is used")
    assert staging._fast_copy is not None, "corral.sdk._fastcopy was not built (see setup.py)"
    assert staging._FAST_KIND == "streaming"


@pytest.mark.parametrize("kind", _kinds())
def test_copies_of_every_size_and_alignment_are_exact(kind):
    copy = staging.copy_function(kind)
    rng = random.Random(7)
    src = bytearray(rng.randbytes(3 * 1024 * 1024 + 77))
    sizes = [0, 1, 15, 16, 17, 63, 64, 127, 128, 129, 1000, 256 * 1024 - 1, 256 * 1024,
             256 * 1024 + 3, 1024 * 1024 + 129, 3 * 1024 * 1024]  # fmt: skip
    for n in sizes:
        for src_off, dst_off in ((0, 0), (1, 3), (8, 13), (15, 1), (16, 31), (5, 0)):
            if src_off + n > len(src):
                continue
            dst = bytearray(b"\xaa" * (n + dst_off + 64))
            s_addr = ctypes.addressof((ctypes.c_char * len(src)).from_buffer(src)) + src_off
            d_addr = ctypes.addressof((ctypes.c_char * len(dst)).from_buffer(dst)) + dst_off
            copy(d_addr, s_addr, n)
            assert dst[dst_off : dst_off + n] == src[src_off : src_off + n], (n, src_off, dst_off)
            assert dst[:dst_off] == b"\xaa" * dst_off  # nothing written outside the target
            assert dst[dst_off + n :] == b"\xaa" * 64


def _isas() -> list[str]:
    fast = sys.modules.get("corral.sdk._fastcopy")
    if fast is None or fast.ISA == "none":
        return []
    return sorted({"sse2", fast.ISA})


@pytest.mark.parametrize("isa", _isas())
def test_each_streaming_variant_copies_exactly(isa):
    """Every variant this CPU can run (the one in use and the SSE2 baseline), around its block
    size, the streaming threshold and every destination alignment of a cache line."""
    from corral.sdk import _fastcopy

    rng = random.Random(11)
    src = bytearray(rng.randbytes(2 * 1024 * 1024 + 300))
    base = 256 * 1024
    sizes = [base, base + 1, base + 63, base + 64, base + 255, base + 256, base + 257,
             1024 * 1024 + 129, 2 * 1024 * 1024]  # fmt: skip
    for n in sizes:
        for src_off, dst_off in ((0, 0), (0, 1), (3, 17), (64, 33), (7, 63), (1, 64), (130, 48)):
            if src_off + n > len(src):
                continue
            dst = bytearray(b"\x5a" * (n + dst_off + 128))
            s_addr = ctypes.addressof((ctypes.c_char * len(src)).from_buffer(src)) + src_off
            d_addr = ctypes.addressof((ctypes.c_char * len(dst)).from_buffer(dst)) + dst_off
            _fastcopy.copy(d_addr, s_addr, n, isa)
            assert dst[dst_off : dst_off + n] == src[src_off : src_off + n], (isa, n, dst_off)
            assert dst[:dst_off] == b"\x5a" * dst_off
            assert dst[dst_off + n :] == b"\x5a" * 128


def test_a_variant_the_cpu_lacks_is_refused():
    fast = sys.modules.get("corral.sdk._fastcopy")
    if fast is None:
        pytest.skip("extension not built")
    with pytest.raises(ValueError, match="not available"):
        fast.copy(0, 0, 0, "no-such-isa")


def test_bad_arguments_are_refused_not_crashing():
    if staging._fast_copy is None:
        pytest.skip("extension not built")
    with pytest.raises(ValueError, match="nbytes"):
        staging._fast_copy(1, 1, -1)
    with pytest.raises(ValueError, match="null"):
        staging._fast_copy(0, 0, 8)
    staging._fast_copy(0, 0, 0)  # nothing to copy: no address is touched


def test_an_unavailable_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="not available"):
        staging.copy_function("no-such-copy")


@pytest.mark.parametrize("kind", _kinds())
def test_snapshots_taken_with_each_copy_restore_exactly(tmp_path, monkeypatch, kind):
    torch = pytest.importorskip("torch")
    from corral.sdk import Checkpointer

    monkeypatch.setattr(staging, "COPY_KIND", kind)
    monkeypatch.setattr(staging, "PARALLEL_COPY_BYTES", 0)  # threads even for a small state
    g = torch.Generator().manual_seed(3)
    state = {"w": torch.randn(300_003, generator=g), "v": torch.randn(77, generator=g)[1:]}
    expected = {k: v.clone() for k, v in state.items()}
    cp = Checkpointer(tmp_path / "ck")
    cp.save(state, 1)
    state["w"].zero_()
    cp.wait()
    out = cp.restore()
    assert all(torch.equal(out[k], expected[k]) for k in expected)


def test_a_tensor_on_a_device_other_than_cpu_is_never_copied_from_its_raw_address():
    """Only CPU memory may be copied by address (an MPS or XLA pointer is not host memory):
    other devices go through Tensor.copy_ (which refuses a meta tensor instead of crashing)."""
    torch = pytest.importorskip("torch")
    pool = staging.StagingPool()
    with pytest.raises(NotImplementedError):
        pool.take(0, torch.empty(1024, device="meta"), "torch")
    assert pool._copies == []


def test_ctrl_c_during_a_parallel_snapshot_leaves_no_copy_running(tmp_path, monkeypatch):
    """The sources may be freed as soon as save() raises: no copy thread may still read them
    (nor write into the reused buffers the next save fills)."""
    import gc
    import os
    import signal
    import threading
    import time

    torch = pytest.importorskip("torch")
    from corral.sdk import Checkpointer

    lock = threading.Lock()
    running, started, finished = [0], [0], [0]
    real = staging.copy_function("memmove")

    def slow_copy(dst, src, n):
        with lock:
            running[0] += 1
            started[0] += 1
            first = started[0] == 1
        if first:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the main thread waits
        time.sleep(0.02)
        real(dst, src, n)
        with lock:
            running[0] -= 1
            finished[0] += 1

    monkeypatch.setattr(staging, "copy_function", lambda kind=None: slow_copy)
    monkeypatch.setattr(staging, "PARALLEL_COPY_BYTES", 0)
    monkeypatch.setattr(staging, "COPY_CHUNK_BYTES", 4096)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    state = {"w": torch.randn(64 * 1024)}  # 64 chunks of 4 KiB
    cp = Checkpointer(tmp_path / "ck")
    # no gc callback may run while the interrupt is due: one raising it (hypothesis times the
    # collector from one) would have it swallowed as "unraisable", and save() never see it
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            cp.save(state, 1)
            time.sleep(5)  # the interrupt lands while save() runs (or, at worst, here)
    finally:
        gc.enable()
        signal.signal(signal.SIGINT, previous)
    assert running[0] == 0, "a copy was still running after save() raised"
    assert started[0] == finished[0] and started[0] < 64  # the rest were cancelled
    monkeypatch.undo()
    cp.save(state, 2)  # the Checkpointer still works after the interrupted snapshot
    cp.wait()
    assert torch.equal(cp.restore()["w"], state["w"])


def test_reserve_allocates_the_buffers_the_first_save_then_uses(tmp_path):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    from corral.sdk import Checkpointer

    state = {"w": torch.randn(100_000), "m": np.arange(5000.0), "step": 3, "b": torch.ones(7)}
    cp = Checkpointer(tmp_path / "ck")
    cp.reserve(state)
    cp.wait()  # the background page-touching is done
    reserved = [id(buf) for buf in cp._pool._slots]
    assert len(reserved) == 3  # one buffer per tensor/array, nothing copied yet
    assert all(float(abs(buf).sum()) == 0.0 for buf in cp._pool._slots)  # touched: zeros
    assert cp.checkpoints() == []
    state["w"] += 1  # the state changes between reserve and save
    cp.save(state, 3)
    assert [id(buf) for buf in cp._pool._slots] == reserved  # the same buffers, filled now
    cp.wait()
    out = cp.restore()
    assert torch.equal(out["w"], state["w"]) and np.array_equal(out["m"], state["m"])
    assert out["step"] == 3 and torch.equal(out["b"], state["b"])


def test_reserve_keeps_fitting_buffers_and_replaces_the_rest(tmp_path):
    torch = pytest.importorskip("torch")
    from corral.sdk import Checkpointer

    cp = Checkpointer(tmp_path / "ck")
    cp.reserve({"w": torch.zeros(1000)})
    cp.wait()
    first = cp._pool._slots[0]
    cp.reserve({"w": torch.zeros(1000), "exp_avg": torch.zeros(1000, dtype=torch.float64)})
    cp.wait()
    assert cp._pool._slots[0] is first and cp._pool._slots[1].dtype == torch.float64
    cp.reserve({"w": torch.zeros(10)})  # smaller state: the extra buffer is dropped
    cp.wait()
    assert len(cp._pool._slots) == 1 and cp._pool._slots[0].numel() == 10


def test_reserve_is_a_no_op_for_synchronous_saves_and_waits_for_a_save_in_flight(tmp_path):
    torch = pytest.importorskip("torch")
    from corral.sdk import Checkpointer

    sync = Checkpointer(tmp_path / "sync", async_save=False)
    sync.reserve({"w": torch.zeros(10)})  # nothing to prepare
    cp = Checkpointer(tmp_path / "ck")
    state = {"w": torch.arange(1000.0)}
    cp.save(state, 1)
    cp.reserve(state)  # must not zero the buffers the save in flight is still writing from
    cp.wait()
    assert torch.equal(cp.restore()["w"], torch.arange(1000.0))
