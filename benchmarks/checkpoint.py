"""Checkpoint speed: corral's Checkpointer against torch.save, DCP async_save, dd and torch.load.

    python benchmarks/checkpoint.py [--json] [--sizes 512,1024] [--rounds 5] [--dir PATH]

For each size (MiB of float32 tensors in a state dict, 32 MiB per tensor plus small ones), every
figure below is measured once per round, the rounds interleaved, and the median reported:

* ``stall_s``: how long ``Checkpointer.save()`` blocks the training loop, when no earlier save
  is still in flight (the very first save also allocates the reused snapshot buffers: it is
  reported apart as ``first_stall_s``; ``first_stall_reserved_s`` is the first save of a
  Checkpointer that was given ``reserve(state)`` beforehand). ``copy_kind`` names the snapshot copy in use
  (``streaming``: non-temporal stores from corral's C extension; ``copy_isa``: ``avx512`` or
  ``sse2`` stores), and ``stall_memmove_s`` is the
  same save with the portable ``memmove`` copy, measured in the same rounds as the baseline;
  ``torch_copy_s`` is the floor any in-memory snapshot pays: ``Tensor.copy_`` of the same tensors
  into buffers allocated beforehand (torch's own multi-threaded copy), right after the same
  in-place step, and ``stall_vs_copy_floor`` is ``stall_s / torch_copy_s``;
* ``torch_save_s``: a synchronous ``torch.save`` of the same state (to the page cache, no
  fsync: the usual call; ``torch_save_fsync_s`` adds the fsync);
* ``dcp_async_stall_s``: how long ``torch.distributed.checkpoint.async_save`` blocks, with a
  single-process gloo group (null with ``dcp_async_note`` when it cannot run);
* ``write_gbps``: bytes / (time from ``save()`` to durable: snapshot, write, hash, fsyncs,
  rename), against ``dd_gbps``: ``dd if=/dev/zero bs=16M conv=fdatasync`` of the same size;
* ``restore_s``: ``Checkpointer.restore()`` (reads and checks every sha256), against
  ``torch_load_s``: ``torch.load`` of the ``torch.save`` file (both files freshly written).

With CUDA present, each size also gets the GPU variant (the state, a model's weights and its
SGD momentum, on the GPU; the snapshot copies run on a side stream into pinned buffers,
overlapped with the next step): ``gpu_stall_s`` (how long ``save()`` blocks the loop, after a
``reserve()``), ``gpu_torch_save_s`` (a synchronous ``torch.save`` of the same state, from the
GPU, to the page cache), ``gpu_step_s`` (one training step: forward, backward, optimizer step)
and ``gpu_step_after_save_s`` (the step right after a save, which overlaps its copies), plus
``gpu_name``; targets ``gpu_stall``: stall <= 5% of torch.save and <= 10% of a step (they are
in ``targets_met`` only when CUDA is present).

Targets (``targets_met``): ``stall``: the stall at most 1.1x the copy floor measured in the same
rounds (``stall_vs_copy_floor <= 1.1``); ``write``: throughput >= 50% of dd; ``restore``: verified
restore <= 1.5x torch.load. ``stall_vs_torch_save`` (``stall_s / torch_save_s``) is reported
for reference: on a CPU-only machine it follows the ratio of memory bandwidth to page-cache
write speed, not corral (docs/checkpoint-stall.md).
Files go to a temporary directory on the same disk as the repository (never /dev/shm) and are
removed at the end. Every figure is wall-clock on a possibly busy machine: run it twice.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
TENSOR_MIB = 32
TARGET_STALL = 1.1  # x the copy floor (torch's own copy into ready buffers, same rounds)
TARGET_WRITE = 0.50  # of dd
TARGET_RESTORE = 1.5  # x torch.load
TARGET_GPU_SAVE = 0.05  # of torch.save, on a GPU
TARGET_GPU_STEP = 0.10  # of one training step, on a GPU
GPU_WIDTH = 2048  # Linear(2048, 2048) layers: 16 MiB of fp32 weights each
GPU_BATCH = 8192


def make_state(size_mib: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    state: dict[str, Any] = {"model": {}, "step": 0, "meta": {"lr": 3e-4, "name": "bench"}}
    for i in range(size_mib // TENSOR_MIB):
        state["model"][f"layer{i}.weight"] = torch.randn(TENSOR_MIB * MIB // 4, generator=g)
        state["model"][f"layer{i}.bias"] = torch.zeros(1024)
    return state


def state_bytes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in state["model"].values())


def train_step(state: dict[str, Any]) -> None:
    """Stand-in for an optimizer step: every parameter changes in place."""
    for t in state["model"].values():
        t.add_(1.0)
    state["step"] += 1


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def fsynced_torch_save(state: dict[str, Any], path: Path) -> tuple[float, float]:
    import torch

    t0 = time.perf_counter()
    torch.save(state, path)
    saved = time.perf_counter() - t0
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return saved, time.perf_counter() - t0


def torch_load(path: Path) -> float:
    import torch

    t0 = time.perf_counter()
    loaded = torch.load(path)
    elapsed = time.perf_counter() - t0
    del loaded
    return elapsed


def dcp_stall(state: dict[str, Any], target: Path) -> float:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    t0 = time.perf_counter()
    future = dcp.async_save(state["model"], checkpoint_id=str(target))
    stall = time.perf_counter() - t0
    future.result()
    shutil.rmtree(target, ignore_errors=True)
    return stall


def dd_seconds(size_mib: int, target: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={size_mib // 16}",
         "conv=fdatasync"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    target.unlink()
    return elapsed


def run_size(size_mib: int, work: Path, rounds: int) -> dict[str, Any]:
    """Every measurement once per round, rounds interleaved (a busy machine hits all alike)."""
    from corral.sdk import Checkpointer, staging

    state = make_state(size_mib)
    nbytes = state_bytes(state)
    cp = Checkpointer(work / "corral", keep_last=1)
    train_step(state)
    first_stall = timed(lambda: cp.save(state, state["step"]))  # allocates snapshot buffers
    cp.wait()
    reserved = Checkpointer(work / "corral-reserved", keep_last=1)
    reserved.reserve(state)
    reserved.wait()  # in a training script the page-touching overlaps the first steps
    first_stall_reserved = timed(lambda: reserved.save(state, state["step"]))
    reserved.close()
    shutil.rmtree(work / "corral-reserved")
    tensors = list(state["model"].values())
    copies = [t.clone() for t in tensors]  # the floor: torch copying into ready buffers
    samples: dict[str, list[float]] = {}
    dcp_note: str | None = None
    for r in range(rounds):
        train_step(state)
        samples.setdefault("stall_s", []).append(timed(lambda: cp.save(state, state["step"])))
        cp.wait()
        samples.setdefault("write_s", []).append(cp.estimated_save_seconds)
        if staging.COPY_KIND != "memmove":
            kind, staging.COPY_KIND = staging.COPY_KIND, "memmove"
            try:
                train_step(state)
                stall = timed(lambda: cp.save(state, state["step"]))
                samples.setdefault("stall_memmove_s", []).append(stall)
                cp.wait()
            finally:
                staging.COPY_KIND = kind
        train_step(state)
        samples.setdefault("torch_copy_s", []).append(
            timed(lambda: [c.copy_(t) for c, t in zip(copies, tensors, strict=True)])
        )
        saved, synced = fsynced_torch_save(state, work / "torch.pt")
        samples.setdefault("torch_save_s", []).append(saved)
        samples.setdefault("torch_save_fsync_s", []).append(synced)
        samples.setdefault("dd_s", []).append(dd_seconds(size_mib, work / "dd.bin"))
        samples.setdefault("restore_s", []).append(timed(cp.restore))
        samples.setdefault("torch_load_s", []).append(torch_load(work / "torch.pt"))
        (work / "torch.pt").unlink()
        if dcp_note is None:
            try:
                samples.setdefault("dcp_s", []).append(dcp_stall(state, work / f"dcp-{r}"))
            except Exception as exc:  # report why it could not run, keep going
                dcp_note = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    cp.close()
    med = {key: statistics.median(values) for key, values in samples.items()}
    result = {
        "stall_s": med["stall_s"],
        "torch_save_s": med["torch_save_s"],
        "dcp_async_stall_s": None if dcp_note else med.get("dcp_s"),
        "write_gbps": nbytes / med["write_s"] / 1e9,
        "dd_gbps": size_mib * MIB / med["dd_s"] / 1e9,
        "restore_s": med["restore_s"],
        "torch_load_s": med["torch_load_s"],
        "first_stall_s": first_stall,
        "first_stall_reserved_s": first_stall_reserved,
        "copy_kind": staging.COPY_KIND,
        "copy_isa": staging.COPY_ISA,
        "stall_memmove_s": med.get("stall_memmove_s", med["stall_s"]),
        "torch_copy_s": med["torch_copy_s"],
        "stall_vs_copy_floor": med["stall_s"] / med["torch_copy_s"],
        "stall_vs_torch_save": med["stall_s"] / med["torch_save_s"],
        "torch_save_fsync_s": med["torch_save_fsync_s"],
        "dcp_async_note": dcp_note,
    }
    if _cuda():
        result.update(gpu_figures(size_mib, work, rounds))
    result["targets_met"] = {
        "stall": result["stall_vs_copy_floor"] <= TARGET_STALL,
        "write": result["write_gbps"] >= TARGET_WRITE * result["dd_gbps"],
        "restore": result["restore_s"] <= TARGET_RESTORE * result["torch_load_s"],
    }
    if "gpu_stall_s" in result:
        result["targets_met"]["gpu_stall"] = (
            result["gpu_stall_s"] <= TARGET_GPU_SAVE * result["gpu_torch_save_s"]
            and result["gpu_stall_s"] <= TARGET_GPU_STEP * result["gpu_step_s"]
        )
    return result


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def gpu_figures(size_mib: int, work: Path, rounds: int) -> dict[str, Any]:
    """The GPU variant (see the module doc): a model of ``size_mib / 2`` MiB of weights plus its
    SGD momentum, trained on the GPU; medians over ``rounds``."""
    import torch

    from corral.sdk import Checkpointer, training_state

    device = torch.device("cuda")
    layers = max(1, size_mib // 2 // (GPU_WIDTH * GPU_WIDTH * 4 // MIB))
    model = torch.nn.Sequential(*[torch.nn.Linear(GPU_WIDTH, GPU_WIDTH) for _ in range(layers)])
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(GPU_BATCH, GPU_WIDTH, device=device)

    def step() -> None:
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    def synced(fn: Any) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def torch_save() -> None:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, work / "gpu-torch.pt")

    for _ in range(3):  # warm up (kernels, the optimizer's state)
        step()
    cp = Checkpointer(work / "gpu", keep_last=1)
    cp.reserve(training_state(model, opt, step=0))  # pinned buffers, allocated once
    cp.wait()
    samples: dict[str, list[float]] = {}
    for r in range(1, rounds + 1):
        samples.setdefault("step", []).append(synced(step))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cp.save(training_state(model, opt, step=r), r)
        samples.setdefault("stall", []).append(time.perf_counter() - t0)
        samples.setdefault("after", []).append(synced(step))  # overlaps the copies
        cp.wait()
        samples.setdefault("torch_save", []).append(synced(torch_save))
        (work / "gpu-torch.pt").unlink()
    cp.close()
    shutil.rmtree(work / "gpu", ignore_errors=True)
    med = {key: statistics.median(values) for key, values in samples.items()}
    return {
        "gpu_stall_s": med["stall"],
        "gpu_torch_save_s": med["torch_save"],
        "gpu_step_s": med["step"],
        "gpu_step_after_save_s": med["after"],
        "gpu_name": torch.cuda.get_device_name(device),
    }


def temp_root(explicit: str | None) -> Path:
    """A directory on the repository's disk: /tmp when it is that disk, else benchmarks/."""
    if explicit:
        return Path(explicit)
    here = Path(__file__).resolve().parent
    system_tmp = Path(tempfile.gettempdir())
    if os.stat(system_tmp).st_dev == os.stat(here).st_dev:
        return system_tmp
    return here


def print_table(results: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.3f} {unit}"

    table = Table(title="corral checkpoint benchmark")
    for col in ("size", "stall", "torch.save", "DCP async stall", "write", "dd", "restore",
                "torch.load"):  # fmt: skip
        table.add_column(col, justify="right")
    for size, r in results.items():
        table.add_row(
            f"{size} MiB", fmt(r["stall_s"], "s"), fmt(r["torch_save_s"], "s"),
            fmt(r["dcp_async_stall_s"], "s"), fmt(r["write_gbps"], "GB/s"),
            fmt(r["dd_gbps"], "GB/s"), fmt(r["restore_s"], "s"), fmt(r["torch_load_s"], "s"),
        )  # fmt: skip
    console = Console()
    console.print(table)
    for size, r in results.items():
        ok = r["targets_met"]
        mark = {True: "[green]met[/]", False: "[red]missed[/]"}
        console.print(
            f"{size} MiB: stall {r['stall_vs_copy_floor']:.2f}x the copy floor "
            f"(target <= {TARGET_STALL}x) {mark[ok['stall']]}, "
            f"{r['stall_vs_torch_save']:.1%} of torch.save; "
            f"write {r['write_gbps'] / r['dd_gbps']:.0%} of dd (target >= {TARGET_WRITE:.0%}) "
            f"{mark[ok['write']]}; restore {r['restore_s'] / r['torch_load_s']:.2f}x torch.load "
            f"(target <= {TARGET_RESTORE}x) {mark[ok['restore']]}; first save stall "
            f"{r['first_stall_s']:.3f} s ({r['first_stall_reserved_s']:.3f} s after reserve())"
        )
        console.print(
            f"  snapshot copy: {r['copy_kind']}"
            + (f" ({r['copy_isa']})" if r["copy_isa"] else "")
            + f"; with the portable memmove copy the stall is "
            f"{r['stall_memmove_s']:.3f} s ({r['stall_memmove_s'] / r['torch_save_s']:.1%} of "
            "torch.save); torch's own copy of the same tensors into ready buffers (the floor of "
            f"any in-memory snapshot) {r['torch_copy_s']:.3f} s: the stall is "
            f"{r['stall_vs_copy_floor']:.2f}x that floor"
        )
        if r["dcp_async_note"]:
            console.print(f"  DCP async_save did not run: {r['dcp_async_note']}")
        if "gpu_stall_s" in r:
            console.print(
                f"  GPU ({r['gpu_name']}): stall {r['gpu_stall_s']:.4f} s = "
                f"{r['gpu_stall_s'] / r['gpu_torch_save_s']:.1%} of torch.save "
                f"({r['gpu_torch_save_s']:.3f} s, target <= {TARGET_GPU_SAVE:.0%}) and "
                f"{r['gpu_stall_s'] / r['gpu_step_s']:.1%} of a step ({r['gpu_step_s']:.4f} s, "
                f"target <= {TARGET_GPU_STEP:.0%}) {mark[ok['gpu_stall']]}; the step right "
                f"after a save {r['gpu_step_after_save_s']:.4f} s"
            )
        else:
            console.print("  GPU variant: not run (no CUDA device here)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--sizes", default="512,1024", help="state sizes in MiB, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each kind per "
                        "size (count; medians are reported)")  # fmt: skip
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir on the "
                        "repository's disk)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be integers in MiB, got {args.sizes!r}")
    if not sizes or any(s < TENSOR_MIB or s % 16 for s in sizes) or args.rounds < 1:
        parser.error(f"sizes must be multiples of 16 MiB, at least {TENSOR_MIB}; rounds >= 1")
    work = Path(tempfile.mkdtemp(prefix="corral-ckpt-bench-", dir=temp_root(args.dir)))
    try:
        results = {str(size): run_size(size, work, args.rounds) for size in sizes}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except ImportError:
            pass
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
