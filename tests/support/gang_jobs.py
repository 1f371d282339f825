"""The jobs of the multi-node tests (the simulated cloud's, the pool's, RunPod's): unmodified
``torchrun`` scripts, gloo on CPU, one rank per node."""

#: every rank all-reduces its rank + 1 and says where it met (the sum of 2 ranks: 3.0)
ALL_REDUCE = """
import os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} node {os.environ['NODE_RANK']} "
      f"sum {total.item()} at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
      flush=True)
dist.destroy_process_group()
"""

#: 40 steps of a weight sharded over the ranks (a DTensor, Shard(0)), w += (sum of rank+1) x
#: step, a sharded corral checkpoint every 4 steps and on a stop (every rank at the same step:
#: should_stop_all), resumed from the newest complete one; rank 0 prints the final weights
#: ("final 2460,..." x 8 for 2 ranks, however often it was stopped) and each node writes its
#: rank in its workdir (node.txt)
SHARDED = """
import datetime, os, sys, time
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from corral.sdk import Checkpointer, install_signal_handlers, should_stop_all

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
install_signal_handlers()
cp = Checkpointer(os.environ["CORRAL_CHECKPOINT_DIR"], keep_last=3)
w, start = distribute_tensor(torch.zeros(8), mesh, [Shard(0)]), 0
if cp.latest() is not None:
    state = cp.restore(template={"w": w, "step": 0})
    w, start = state["w"], state["step"]
print(f"rank {rank} of {world} starts at step {start}", flush=True)
open("node.txt", "w").write(os.environ["NODE_RANK"])  # in this machine's workdir
saved = start
for step in range(start + 1, 40 + 1):
    g = torch.tensor([rank + 1.0])
    dist.all_reduce(g)
    w = w + g.item() * step
    if step % 4 == 0:
        cp.save({"w": w, "step": step}, step)
        saved = step
    if should_stop_all():
        if saved != step:
            cp.save({"w": w, "step": step}, step)
        cp.wait()
        print(f"rank {rank} stops at step {step}", flush=True)
        dist.barrier()
        sys.exit(75)
    time.sleep(0.2)
cp.wait()
full = w.full_tensor()
if rank == 0:
    print("final " + ",".join(f"{v:g}" for v in full.tolist()), flush=True)
dist.barrier()
dist.destroy_process_group()
"""

#: a 2-node job on PROVIDER (replace it): ALL_REDUCE as ``train.py`` on every node, then a
#: stage on the head only
TWO_NODE_SPEC = """
name: gang
resources: {nodes: 2, providers: [PROVIDER]}
env: {OMP_NUM_THREADS: 1}
stages:
  - name: train
    run: torchrun --nproc-per-node 1 train.py
    nodes: all
  - name: report
    run: echo "head only, node $CORRAL_NODE_RANK of $CORRAL_NUM_NODES"
    needs: train
"""
