"""Sharded checkpoints: every rank of a gloo job (2 and 4 processes on loopback) writes its part
of one checkpoint; one COMPLETE lists every part; restore reshards into another world size; a
rank killed mid-save leaves the previous checkpoint the newest valid one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from corral.sdk import Checkpointer
from corral.wire.env import EXIT_PREEMPTED

from ..gloo_parts import free_port, rank_env

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = Path(__file__).resolve().parent / "scripts" / "sharded_worker.py"
sys.path.insert(0, str(WORKER.parent))
from sharded_worker import expected  # noqa: E402


def start(world: int, *args: str, tmp: Path) -> list[tuple[subprocess.Popen, Path]]:
    port = free_port()
    procs = []
    for rank in range(world):
        out = tmp / f"rank{rank}-{args[0]}-{world}.out"
        with out.open("w") as f:
            procs.append((subprocess.Popen(
                [sys.executable, str(WORKER), *args], stdout=f, stderr=subprocess.STDOUT,
                env=rank_env(rank, port, world_size=world),
            ), out))  # fmt: skip
    return procs


def finish(procs, timeout: float = 240) -> list[str]:
    deadline = time.monotonic() + timeout
    try:
        for proc, _ in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pytest.fail(f"a rank hung: {[o.read_text()[-2000:] for _, o in procs]}")
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [out.read_text() for _, out in procs]


def run(world: int, *args: str, tmp: Path) -> list[str]:
    procs = start(world, *args, tmp=tmp)
    outs = finish(procs)
    codes = [p.returncode for p, _ in procs]
    assert codes == [0] * world, outs
    return outs


def test_two_ranks_write_one_checkpoint_that_restores_into_one_two_and_four_ranks(tmp_path):
    ck = tmp_path / "ck"
    outs = run(2, "save", str(ck), tmp=tmp_path)
    assert all("saved 2 sharded=True" in o for o in outs)
    assert sorted(os.listdir(ck)) == ["ckpt-1", "ckpt-2"]
    manifest = json.loads((ck / "ckpt-2" / "COMPLETE").read_text())
    assert manifest["format_version"] == 2 and manifest["world_size"] == 2
    assert manifest["metrics"] == {"loss": 0.5}
    assert sorted(manifest["files"]) == sorted(
        f"r0000{r}-{n}" for r in (0, 1)
        for n in ("dtensors.json", "state.pkl", "tensors-00000.safetensors")
    )  # fmt: skip
    info = Checkpointer(ck).latest()  # every rank's files, sha256-checked
    assert info is not None and info.step == 2 and info.world_size == 2
    # a replicated chunk is written once: "b" by rank 0 only
    index1 = json.loads((ck / "ckpt-2" / "r00001-dtensors.json").read_text())
    assert "file" not in index1["model.b"] and index1["model.w"]["offsets"] == [4, 0]

    run(2, "restore", str(ck), "2", "2", tmp=tmp_path)
    run(4, "restore", str(ck), "2", "2", tmp=tmp_path)  # resharded: 2 -> 4 ranks
    # one process without torch.distributed: whole tensors
    state = Checkpointer(ck).restore()
    assert torch.equal(state["model"]["w"], expected("w", 2))
    assert isinstance(state["model"]["w"], torch.nn.Parameter)
    assert torch.equal(state["optimizer"]["state"][0]["exp_avg"], expected("exp_avg", 2))
    assert torch.equal(state["model"]["emb"], expected("emb", 2)) and state["rank"] == 0


def test_four_ranks_with_a_2d_mesh_restore_into_two(tmp_path):
    ck = tmp_path / "ck"
    run(4, "save", str(ck), tmp=tmp_path)
    manifest = json.loads((ck / "ckpt-2" / "COMPLETE").read_text())
    assert manifest["world_size"] == 4 and len(manifest["files"]) == 12
    run(2, "restore", str(ck), "2", "4", tmp=tmp_path)
    state = Checkpointer(ck).restore("ckpt-1")
    assert torch.equal(state["model"]["emb"], expected("emb", 1))
    assert torch.equal(state["model"]["b"], expected("b", 1))


def test_kill9_of_one_rank_mid_save_leaves_the_previous_checkpoint_the_newest(tmp_path):
    ck = tmp_path / "job" / "ck"
    ck.parent.mkdir()
    procs = start(2, "kill", str(ck), tmp=tmp_path)
    marker = tmp_path / "job" / "stuck-1"
    deadline = time.monotonic() + 180
    while not marker.exists():  # rank 1 is writing its part of step 2
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            finish(procs, timeout=1)
            pytest.fail(f"rank 1 never got stuck: {[o.read_text() for _, o in procs]}")
        time.sleep(0.05)
    procs[1][0].send_signal(signal.SIGKILL)
    outs = finish(procs, timeout=120)
    assert procs[1][0].returncode == -signal.SIGKILL
    assert procs[0][0].returncode == 3, outs  # rank 0's wait() raised, nothing published
    assert "save 2 failed" in outs[0] and "latest 1" in outs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing torn is even looked at
        latest = Checkpointer(ck).latest()
    assert latest is not None and latest.step == 1
    assert [n for n in os.listdir(ck) if n.startswith("ckpt-2")] in ([], ["ckpt-2.tmp"])
    assert torch.equal(Checkpointer(ck).restore()["model"]["w"], expected("w", 1))


def test_a_sigterm_makes_every_rank_save_its_part_and_all_exit_75(tmp_path):
    ck = tmp_path / "ck"
    procs = start(2, "preempt", str(ck), tmp=tmp_path)
    deadline = time.monotonic() + 180
    while "ready" not in procs[1][1].read_text():
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            finish(procs, timeout=1)
            pytest.fail(f"never ready: {[o.read_text() for _, o in procs]}")
        time.sleep(0.05)
    procs[1][0].send_signal(signal.SIGTERM)  # rank 1 only
    outs = finish(procs, timeout=120)
    assert [p.returncode for p, _ in procs] == [EXIT_PREEMPTED] * 2, outs
    info = Checkpointer(ck).latest()
    assert info is not None and info.world_size == 2  # both ranks' parts, one checkpoint
    state = Checkpointer(ck).restore()
    assert torch.equal(state["model"]["w"], expected("w", info.step))
