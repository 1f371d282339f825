"""Sharded checkpoints: N ranks each saving their shard at once, against one rank saving it all.

    python benchmarks/checkpoint_sharded.py [--json] [--shard-mib 256] [--rounds 3] [--dir PATH]

Each rank is a process of a gloo group on loopback (as torchrun starts them: the group's
address and the rank's in the environment), forked from a server process that imported torch
once, so the run does not pay torch's import in every rank it starts (the figures are barrier
to barrier and never counted it), holding
``--shard-mib`` MiB of float32 DTensor shards (``Shard(0)`` over a 1-D mesh: FSDP's layout).
Measured in the same run, medians over ``--rounds``, every file fsynced (the durable save):

* ``sharded_2_s`` / ``sharded_4_s``: 2 / 4 ranks saving one sharded checkpoint, from the
  moment every rank calls ``save()`` until every rank's ``wait()`` returned (barrier to
  barrier: each rank's part written and hashed, ``COMPLETE`` published by rank 0);
* ``single_2_s`` / ``single_4_s`` (the baseline): one process saving the same bytes (2 / 4
  shards' worth of plain tensors) with the same Checkpointer, save() to durable;
* ``sharded_speedup_2`` / ``sharded_speedup_4``: baseline / sharded;
* ``restore_2_to_4_s`` / ``restore_4_to_2_s``: restoring the 2-rank checkpoint into 4 ranks and
  the 4-rank one into 2 (resharding, every file sha256-checked as it is read), barrier to
  barrier, against ``restore_single_2_s`` / ``restore_single_4_s``: the one-process checkpoint
  restored in one process.

The speedup is bounded by the cores and the disk: on the 2-core reference machine 4 ranks
share 2 cores, and one disk takes every rank's writes. Files go to a temporary directory on
the repository's disk and are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
TENSOR_MIB = 32


def _tensors(shard_mib: int) -> int:
    return max(1, shard_mib // TENSOR_MIB)


# --- a rank ---------------------------------------------------------------------------------

#: what the ranks' server imports once, before it forks each rank
RANK_IMPORTS = ["torch", "torch.distributed", "torch.distributed.device_mesh",
                "torch.distributed.tensor", "corral.sdk"]  # fmt: skip


def worker(mode: str, directory: str, rounds: int, shard_mib: int, saved_world: int) -> float:
    """``shard_mib``: the MiB per rank of the save (of the ``saved_world``-rank job); a restore
    into another world size uses the same global shapes, sharded over this world. Returns the
    median seconds of this rank."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from corral.sdk import Checkpointer

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    rows = TENSOR_MIB * MIB // 4 // 1024 * saved_world  # global rows of 1024 floats

    def state() -> dict[str, Any]:
        out = {}
        for i in range(_tensors(shard_mib)):
            dt = distribute_tensor(  # each rank holds its shard; no data sent
                torch.empty(rows, 1024), mesh, [Shard(0)], src_data_rank=None
            )
            dt.to_local().fill_(float(rank + i))
            out[f"layer{i}.weight"] = dt
        return {"model": out, "step": 0}

    timings: list[float] = []
    cp = Checkpointer(directory, keep_last=1)
    if mode == "save":
        s = state()
        cp.reserve(s)
        cp.wait()
        for r in range(rounds):
            dist.barrier()
            t0 = time.perf_counter()
            cp.save(s, r + 1)
            cp.wait()
            dist.barrier()
            timings.append(time.perf_counter() - t0)
    else:  # restore, resharded into this world size
        template = state()
        for _ in range(rounds):
            dist.barrier()
            t0 = time.perf_counter()
            restored = cp.restore(template=template)
            dist.barrier()
            timings.append(time.perf_counter() - t0)
            assert (
                restored["model"]["layer0.weight"].shape == template["model"]["layer0.weight"].shape
            )
            del restored
    dist.destroy_process_group()
    return statistics.median(timings)


def _rank(env: dict[str, str], results: Any, *args: Any) -> None:
    """One rank in a process forked from the ranks' server: its part of the group's address
    in the environment, as torchrun gives it; rank 0 puts its median seconds in ``results``."""
    import torch

    os.environ.update(env)
    torch.set_num_threads(1)  # OMP_NUM_THREADS=1: torch is loaded before this rank's env
    seconds = worker(*args)
    if env["RANK"] == "0":
        results.put(seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ranks(
    world: int, mode: str, directory: Path, rounds: int, shard_mib: int, saved_world: int
) -> float:
    """Run ``world`` ranks of ``worker``; rank 0's median seconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(RANK_IMPORTS)
    port = _free_port()
    results = context.SimpleQueue()
    procs = []
    for rank in range(world):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1"}  # fmt: skip
        args = (mode, str(directory), rounds, shard_mib, saved_world)
        procs.append(context.Process(target=_rank, args=(env, results, *args)))
        procs[-1].start()
    for proc in procs:
        proc.join(1800)
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a {mode} rank failed: exit codes {[p.exitcode for p in procs]}")
    return float(results.get())


def single(total_mib: int, directory: Path, rounds: int) -> tuple[float, float]:
    """One process saving (save() to durable) and restoring ``total_mib`` of plain tensors."""
    import torch

    from corral.sdk import Checkpointer

    rows = TENSOR_MIB * MIB // 4 // 1024
    state = {"model": {f"t{i}": torch.full((rows, 1024), float(i))
                       for i in range(total_mib // TENSOR_MIB)}, "step": 0}  # fmt: skip
    cp = Checkpointer(directory, keep_last=1)
    cp.reserve(state)
    cp.wait()
    saves, restores = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        cp.save(state, r + 1)
        cp.wait()
        saves.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        restored = cp.restore()
        restores.append(time.perf_counter() - t0)
        del restored
    cp.close()
    return statistics.median(saves), statistics.median(restores)


def measure(work: Path, shard_mib: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"shard_mib": shard_mib, "rounds": rounds, "cpus": os.cpu_count()}
    for world in (2, 4):
        out[f"single_{world}_s"], out[f"restore_single_{world}_s"] = single(
            world * shard_mib, work / f"single-{world}", rounds
        )
        shutil.rmtree(work / f"single-{world}", ignore_errors=True)
        out[f"sharded_{world}_s"] = ranks(world, "save", work / f"sharded-{world}", rounds,
                                          shard_mib, world)  # fmt: skip
        out[f"sharded_speedup_{world}"] = out[f"single_{world}_s"] / out[f"sharded_{world}_s"]
    # resharded restores: the 2-rank checkpoint into 4 ranks, the 4-rank one into 2
    out["restore_2_to_4_s"] = ranks(4, "restore", work / "sharded-2", rounds, shard_mib, 2)
    out["restore_4_to_2_s"] = ranks(2, "restore", work / "sharded-4", rounds, shard_mib, 4)
    return out


def temp_root(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    here = Path(__file__).resolve().parent
    system_tmp = Path(tempfile.gettempdir())
    return system_tmp if os.stat(system_tmp).st_dev == os.stat(here).st_dev else here


def print_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sharded checkpoints: {r['shard_mib']} MiB per rank, {r['cpus']} CPUs")
    for col in ("ranks", "sharded save", "one process, same bytes", "speedup",
                "restore resharded", "one-process restore"):  # fmt: skip
        table.add_column(col, justify="right")
    for world, other in ((2, 4), (4, 2)):
        table.add_row(
            str(world), f"{r[f'sharded_{world}_s']:.2f} s", f"{r[f'single_{world}_s']:.2f} s",
            f"{r[f'sharded_speedup_{world}']:.2f}x",
            f"{r[f'restore_{world}_to_{other}_s']:.2f} s ({world} -> {other} ranks)",
            f"{r[f'restore_single_{world}_s']:.2f} s",
        )  # fmt: skip
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--shard-mib", type=int, default=256, help="MiB per rank (>= 64)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each kind")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir on the "
                        "repository's disk)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.shard_mib < 2 * TENSOR_MIB or args.shard_mib % (2 * TENSOR_MIB) or args.rounds < 1:
        parser.error(f"--shard-mib must be a multiple of {2 * TENSOR_MIB}; --rounds >= 1")
    work = Path(tempfile.mkdtemp(prefix="corral-sharded-bench-", dir=temp_root(args.dir)))
    try:
        result = measure(work, args.shard_mib, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
