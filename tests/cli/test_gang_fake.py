"""A multi-node job on the simulated cloud (``resources.nodes: 2``): ``corral launch`` rents a
gang of two machines, each its own machine root, and an unmodified ``torchrun`` command meets
across them (gloo on CPU over loopback) with no rendezvous flag; the run is billed for both
machines, and every machine is gone at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD
from corral.store import Store

from .helpers import wait_state
from .test_debug import cli, write_spec

pytest.importorskip("torch.distributed")

TRAIN = """
import os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} node {os.environ['NODE_RANK']} "
      f"sum {total.item()} root {os.environ['CORRAL_CHECKPOINT_DIR']}", flush=True)
dist.destroy_process_group()
"""

SPEC = """
name: gang
resources: {nodes: 2, providers: [fake]}
env: {OMP_NUM_THREADS: 1}
stages:
  - name: train
    run: torchrun --nproc-per-node 1 train.py
    nodes: all
  - name: report
    run: echo "head only, node $CORRAL_NODE_RANK of $CORRAL_NUM_NODES"
    needs: train
"""

CLOUD = {
    "offers": [
        {"id": "cpu-4", "region": "r1", "gpu_count": 0, "cpus": 2, "memory_gb": 4,
         "on_demand_price": 0.5, "capacity": 3},
    ],
    "launch_delay_s": 0.2,
}  # fmt: skip


@pytest.mark.slow
def test_a_two_node_torchrun_job_meets_across_two_machines_and_is_billed_for_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps(CLOUD))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    (tmp_path / "train.py").write_text(TRAIN)
    code, out, err = cli("launch", write_spec(tmp_path, SPEC), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    run = wait_state(run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
    code, logs, _ = cli("logs", run_id, "--stage", "train")
    assert run["state"] == "SUCCEEDED", (run, logs)
    # the head's rank: world of 2 across the two machines, 1 + 2 summed
    assert "rank 0 of 2 node 0 sum 3.0" in logs, logs
    code, report, _ = cli("logs", run_id, "--stage", "report")
    assert "head only, node 0 of 1" in report
    store = Store.open()
    launched = store.events(run_id, types=["instance.launched"])
    assert [e.data.get("node") for e in launched] == [0, 1], launched
    machines = {e.data["instance_id"] for e in launched}
    assert len(machines) == 2
    ended = store.events(run_id, types=["instance.terminated"])
    assert {e.reason.split(": ")[-1] for e in ended} == machines  # both released at the end
    # billed for the gang: two machines at $0.50/h, from the attempt's start to the teardown
    (attempt,) = store.attempts(run_id)
    assert attempt.price_per_hour == pytest.approx(1.0)
    assert attempt.billed_until is not None and attempt.started_at is not None
    billed_h = (attempt.billed_until - attempt.started_at).total_seconds() / 3600
    assert attempt.cost_usd == pytest.approx(billed_h * 1.0, abs=1e-6)
    home = Path(os.environ["CORRAL_HOME"])
    assert not [p for p in (home / "fake" / "instances").glob("*/machine/fs") if p.exists()]
