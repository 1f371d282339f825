"""One rank of a sharded-checkpoint job on gloo over loopback (used by test_sharded.py).

    sharded_worker.py save DIR            save steps 1 and 2 (FSDP-like and TP-like DTensors)
    sharded_worker.py restore DIR STEP    restore into this world size, with and without a
                                          template, and check every value
    sharded_worker.py kill DIR            save step 1, then step 2 with rank 1's writes stuck
                                          (the test kills rank 1 with SIGKILL meanwhile)
    sharded_worker.py preempt DIR         a loop that saves sharded on a SIGTERM (exit 75)

The environment is torchrun's (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The full value of
every tensor is a function of its name and the step (``expected``), so any rank can check any
part of it.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from corral.sdk import Checkpointer, LocalStorage, exit_if_preempted, install_signal_handlers

SHAPES = {"w": (7, 3), "b": (5,), "emb": (6, 4), "exp_avg": (7, 3)}


def expected(name: str, step: int) -> torch.Tensor:
    shape = SHAPES[name]
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float32) + 1000 * step + len(name)).reshape(shape)


def layouts(world: int) -> dict[str, tuple]:
    """(mesh, placements) per tensor: FSDP-like Shard(0) on a 1-D mesh; with 4 ranks also a
    2-D mesh (2 x 2) with TP-like placements."""
    flat = init_device_mesh("cpu", (world,))
    out = {"w": (flat, [Shard(0)]), "b": (flat, [Replicate()]), "exp_avg": (flat, [Shard(0)])}
    if world % 2 == 0 and world >= 4:
        grid = init_device_mesh("cpu", (2, world // 2))
        out["emb"] = (grid, [Shard(0), Shard(1)])
        out["b"] = (grid, [Replicate(), Shard(0)])
    else:
        out["emb"] = (flat, [Shard(1)])
    return out


def state_for(step: int, world: int, rank: int) -> dict:
    lay = layouts(world)

    def dt(name: str) -> DTensor:
        mesh, placements = lay[name]
        return distribute_tensor(expected(name, step), mesh, placements, src_data_rank=None)

    return {
        "model": {"w": torch.nn.Parameter(dt("w")), "b": dt("b"), "emb": dt("emb")},
        "optimizer": {"state": {0: {"exp_avg": dt("exp_avg"), "step": torch.tensor(float(step))}}},
        "rank": rank,
        "step": step,
        "rows": np.arange(4) + rank,
    }


def check(state: dict, step: int, rank: int, world_now: int, world_saved: int, sharded: bool):
    model = state["model"]
    for name, value in (("w", model["w"]), ("b", model["b"]), ("emb", model["emb"]),
                        ("exp_avg", state["optimizer"]["state"][0]["exp_avg"])):  # fmt: skip
        if sharded:
            assert isinstance(value, DTensor), (name, type(value))
            full = value.full_tensor()
        else:
            assert not isinstance(value, DTensor), name
            full = value
        assert torch.equal(full, expected(name, step)), (name, full)
    assert isinstance(model["w"], torch.nn.Parameter)
    assert state["step"] == step and float(state["optimizer"]["state"][0]["step"]) == step
    saved_rank = rank if rank < world_saved else 0
    assert state["rank"] == saved_rank and list(state["rows"]) == list(np.arange(4) + saved_rank)


class StuckStorage(LocalStorage):
    """Rank 1's writes of step 2 never finish (it says so in a marker file first)."""

    def __init__(self, marker: str):
        super().__init__()
        self.marker = marker

    def open_write(self, path: str):
        if "ckpt-2" in path and os.path.basename(path).startswith("r00001-"):
            with open(self.marker, "w") as f:
                f.write("writing")
            time.sleep(600)
        return super().open_write(path)


def main() -> None:
    mode, directory = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "save":
        cp = Checkpointer(directory, keep_last=5)
        for step in (1, 2):
            cp.save(state_for(step, world, rank), step, metrics={"loss": 1.0 / step})
        cp.wait()
        print(f"saved {cp.last_saved_step} sharded={cp.sharded}", flush=True)
    elif mode == "restore":
        step, world_saved = int(sys.argv[3]), int(sys.argv[4])
        cp = Checkpointer(directory)
        template = state_for(0, world, rank)  # the shardings wanted now, any values
        check(cp.restore(template=template), step, rank, world, world_saved, sharded=True)
        check(cp.restore(), step, rank, world, world_saved, sharded=False)
        print("restored", flush=True)
    elif mode == "kill":
        storage = StuckStorage(os.path.join(directory, f"..{os.sep}stuck-{rank}"))
        cp = Checkpointer(directory, storage=storage, keep_last=5)
        cp.save(state_for(1, world, rank), 1)
        cp.wait()
        print("saved 1", flush=True)
        cp.save(state_for(2, world, rank), 2)
        try:
            cp.wait()
        except Exception as exc:
            print(f"save 2 failed: {exc}", flush=True)
            latest = Checkpointer(directory).latest()
            print(f"latest {latest.step if latest else None}", flush=True)
            os._exit(3)
        print("save 2 succeeded", flush=True)
        os._exit(0)
    elif mode == "preempt":
        cp = Checkpointer(directory, keep_last=5)
        install_signal_handlers()
        for step in range(1, 10_000):
            grad = torch.ones(1)
            dist.all_reduce(grad)
            if step == 5:
                print("ready", flush=True)
            exit_if_preempted(cp, lambda s=step: state_for(s, world, rank), step=step)
            time.sleep(0.02)
    # every rank leaves together: rank 0 holds the rendezvous store, and tearing the group
    # down while another rank still talks to it can abort the process at exit (seen in CI:
    # "terminate called without an active exception", exit -6, after a good restore)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
