"""The GPU snapshot's ordering logic, on the CPU: a stand-in for the CUDA streams whose copies
finish only when the test opens a gate. The code under test is the one that runs on a GPU
(corral.sdk.device_snapshot and the staging pool); only the streams are replaced."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, device_snapshot, training_state
from corral.sdk.manifest import CheckpointError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


class FakeEvent:
    def __init__(self) -> None:
        self.done = threading.Event()

    def query(self) -> bool:
        return self.done.is_set()

    def synchronize(self) -> None:
        assert self.done.wait(30), "a copy never finished"


class FakeStreams:
    """Tensors whose memory is in ``device`` are 'on the GPU'. Side-stream copies run in order
    on one worker thread, each once the gate is open (a copy of memory in ``blocked`` waits for
    the gate; others run at once); current-stream copies run at once (the host is that
    stream). ``wait_on_current`` records the wait, opens the gate (the copy ends some time after
    the step started waiting) and blocks the host, which is what a device-side wait means for
    the work the host runs next: so a step that did not wait would change the tensors before
    their copies ran, and the saved state would show it."""

    def __init__(self) -> None:
        self.device: set[int] = set()
        self.blocked: set[int] | None = None  # None: every side copy waits for the gate
        self.gate = threading.Event()
        self.side: list[int] = []
        self.current: list[int] = []
        self.waited: list[int] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def mark(self, *tensors) -> None:
        for t in tensors:
            self.device.add(t.untyped_storage().data_ptr())

    def _run(self) -> None:
        while True:
            key, dst, src, event = self._queue.get()
            if self.blocked is None or key in self.blocked:
                self.gate.wait()
            dst.copy_(src)
            event.done.set()

    def is_device(self, tensor) -> bool:
        return tensor.untyped_storage().data_ptr() in self.device

    def pinned_empty(self, like):
        return torch.empty(tuple(like.shape), dtype=like.dtype)

    def copy_async(self, dst, src, *, side):
        event = FakeEvent()
        key = src.untyped_storage().data_ptr()
        if side:
            self.side.append(key)
            self._queue.put((key, dst, src, event))
        else:
            self.current.append(key)
            dst.copy_(src)
            event.done.set()
        return event

    def wait_on_current(self, event, tensor) -> None:
        self.waited.append(tensor.untyped_storage().data_ptr())
        self.gate.set()
        event.synchronize()


@pytest.fixture
def streams():
    fake = FakeStreams()
    old = device_snapshot.use_backend(fake)
    try:
        yield fake
    finally:
        fake.gate.set()
        device_snapshot.use_backend(old)


def key(t) -> int:
    return t.untyped_storage().data_ptr()


def setup_model(streams, optimizer: str = "sgd"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16))
    params = list(model.parameters())
    opt = {
        "sgd": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        "adam-foreach": lambda: torch.optim.Adam(params, lr=0.01, foreach=True),
        "adamw-fused": lambda: torch.optim.AdamW(params, lr=0.01, fused=True),
    }[optimizer]()
    train_step(model, opt)  # the optimizer's state exists now
    streams.mark(*model.parameters(), *model.buffers(), *tensors_of(opt))
    return model, opt


def tensors_of(opt):
    return [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


def train_step(model, opt, step=True):
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if step:
        opt.step()


def frozen(model, opt) -> dict:
    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "exp": [t.clone() for t in tensors_of(opt)],
    }


@pytest.mark.parametrize("optimizer", ["sgd", "adam-foreach", "adamw-fused"])
def test_save_returns_at_once_and_the_step_waits_for_the_copies_of_its_tensors(
    tmp_path: Path, streams, optimizer
):
    model, opt = setup_model(streams, optimizer)
    before = frozen(model, opt)
    ckpt = Checkpointer(tmp_path / "ck")
    started = time.perf_counter()
    ckpt.save(training_state(model, opt, step=1), 1)
    assert time.perf_counter() - started < 1.0  # not waiting for the gate
    guarded = {key(p) for p in model.parameters()} | {key(t) for t in tensors_of(opt)}
    assert set(streams.side) == guarded  # the optimizer's tensors: on the side stream
    assert {key(b) for b in model.buffers()} <= set(streams.current)  # BN statistics: in order
    train_step(model, opt, step=False)  # forward and backward overlap the copies
    assert streams.waited == [] and not streams.gate.is_set()
    opt.step()  # waits in its pre-hook until the copies of its tensors are done
    assert streams.waited and set(streams.waited) <= guarded
    ckpt.wait()
    saved = Checkpointer(tmp_path / "ck").restore()
    for name, value in before["model"].items():  # the state at save(), bitwise
        assert torch.equal(saved["model"][name], value), name
    assert not torch.equal(model[0].weight, before["model"]["0.weight"])  # and it did step


def test_a_step_waits_only_for_its_own_tensors_and_only_while_their_copy_runs(
    tmp_path: Path, streams
):
    a_model, a_opt = setup_model(streams)
    b_model, b_opt = setup_model(streams)
    streams.blocked = {key(p) for p in a_model.parameters()} | {key(t) for t in tensors_of(a_opt)}
    ckpt = Checkpointer(tmp_path / "ck")
    state = {
        "b": training_state(b_model, b_opt, step=1),
        "a": training_state(a_model, a_opt, step=1),
    }
    ckpt.save(state, 1)  # b's copies are queued first and finish; a's wait for the gate
    deadline = time.monotonic() + 10
    # b's parameters and its optimizer's state: the step waits for any of them still copied
    b_keys = {key(p) for p in b_model.parameters()} | {key(t) for t in tensors_of(b_opt)}
    while not all(
        g.event.query() for k, gs in device_snapshot._pending.items() if k in b_keys for g in gs
    ):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    train_step(b_model, b_opt)  # its copies are done: no wait at all
    assert streams.waited == []
    train_step(a_model, a_opt)  # waits for a's copies only
    assert streams.waited and set(streams.waited) <= streams.blocked
    ckpt.wait()
    train_step(a_model, a_opt)  # nothing pending any more: no new wait
    assert set(streams.waited) <= streams.blocked and not device_snapshot._pending


def test_a_tensor_changed_outside_the_step_while_copied_fails_the_save_not_silently(
    tmp_path: Path, streams
):
    model, opt = setup_model(streams)
    ckpt = Checkpointer(tmp_path / "ck")
    streams.gate.set()
    ckpt.save(training_state(model, opt, step=1), 1)
    ckpt.wait()
    streams.gate.clear()
    ckpt.save(training_state(model, opt, step=2), 2)
    with torch.no_grad():
        model[0].weight.clamp_(-0.01, 0.01)  # e.g. weight clipping right after the save
    streams.gate.set()
    with pytest.raises(CheckpointError, match=r"'model\.0\.weight'.*changed in place"):
        ckpt.wait()
    assert Checkpointer(tmp_path / "ck").latest().step == 1  # the earlier one stays
    assert not device_snapshot._pending


def test_amp_grad_scaler_skipped_steps_do_not_wait_and_taken_ones_do(tmp_path: Path, streams):
    model, opt = setup_model(streams)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    ckpt = Checkpointer(tmp_path / "ck")
    ckpt.save(training_state(model, opt, scaler=scaler, step=1), 1)
    loss = model(torch.randn(8, 16)).pow(2).mean() * float("inf")  # overflow: step skipped
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert streams.waited == []  # no optimizer step ran: nothing to wait for
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)  # a real step: waits in the hook
    scaler.update()
    assert streams.waited
    ckpt.wait()


@pytest.mark.slow
def test_under_torch_compile_the_hook_still_orders_the_step(tmp_path: Path, streams):
    model, opt = setup_model(streams)
    compiled = torch.compile(model, backend="eager")

    @torch.compile(backend="eager")
    def step():
        opt.step()

    x = torch.randn(8, 16)
    compiled(x).pow(2).mean().backward()
    step()  # compiled once before the save
    before = frozen(model, opt)
    ckpt = Checkpointer(tmp_path / "ck")
    ckpt.save(training_state(model, opt, step=1), 1)
    opt.zero_grad()
    compiled(x).pow(2).mean().backward()
    step()
    assert streams.waited
    ckpt.wait()
    saved = Checkpointer(tmp_path / "ck").restore()
    for name, value in before["model"].items():
        assert torch.equal(saved["model"][name], value), name


def test_a_dtensor_parameters_shard_is_guarded_by_its_optimizers_step(tmp_path: Path, streams):
    """FSDP2-style: the parameter is a DTensor; its local shard is what the step changes."""
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        w = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)]))
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, foreach=False)
        w.grad = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])
        opt.step()
        streams.mark(w._local_tensor, *(v._local_tensor for v in tensors_of(opt)))
        before = w.full_tensor().clone()
        device_snapshot.watch(opt)  # (training_state(model, opt) does it)
        ckpt = Checkpointer(tmp_path / "ck")
        ckpt.save({"w": w, "opt": opt.state_dict()}, 1)
        assert key(w._local_tensor) in streams.side and not streams.gate.is_set()
        opt.step()  # waits for the shard's copy
        assert key(w._local_tensor) in streams.waited
        ckpt.wait()
        assert torch.equal(Checkpointer(tmp_path / "ck").restore()["w"], before)
    finally:
        dist.destroy_process_group()
