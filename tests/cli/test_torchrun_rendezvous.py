"""A ``torchrun`` stage gets its rendezvous from corral: launched with ``corral launch`` on the
local provider as a user writes it (``torchrun --nnodes 1 --nproc-per-node 2 train.py``, no
address, port or rendezvous flag), its two ranks (gloo on CPU) read corral's node variables,
meet on the port the agent chose and all_reduce; a plain stage beside it gets the same
variables, a port of its own, and the job's own MASTER_PORT wins where it is set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .helpers import wait_state
from .test_debug import cli, write_spec

pytest.importorskip("torch.distributed")

TRAIN = """
import json, os, pathlib
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
keys = ("CORRAL_NUM_NODES", "CORRAL_NODE_RANK", "CORRAL_MASTER_ADDR", "CORRAL_MASTER_PORT",
        "MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "PET_NNODES", "PET_NODE_RANK",
        "WORLD_SIZE", "GROUP_RANK")
out = {k: os.environ.get(k) for k in keys}
out["sum"] = total.item()
pathlib.Path(f"rank-{rank}.json").write_text(json.dumps(out))
dist.destroy_process_group()
"""

PLAIN = """
import json, os, pathlib
keys = ("CORRAL_NUM_NODES", "CORRAL_NODE_RANK", "CORRAL_MASTER_ADDR", "CORRAL_MASTER_PORT",
        "MASTER_PORT", "PET_MASTER_PORT")
pathlib.Path(os.environ["CORRAL_STAGE"] + ".json").write_text(
    json.dumps({k: os.environ.get(k) for k in keys}))
"""

SPEC = """
name: meet
resources: {providers: [local]}
env: {OMP_NUM_THREADS: 1}
stages:
  - name: train
    run: torchrun --nnodes 1 --nproc-per-node 2 train.py
  - name: plain
    run: python plain.py
  - name: pinned
    run: python plain.py
    env: {MASTER_PORT: "29123"}
"""


@pytest.mark.slow
def test_torchrun_without_rendezvous_flags_meets_on_corrals_port(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "plain.py").write_text(PLAIN)
    code, out, err = cli("launch", write_spec(tmp_path, SPEC), "--detach", "--json")
    assert code == 0, err
    run = wait_state(json.loads(out)["id"], {"SUCCEEDED", "FAILED"}, timeout=120)
    assert run["state"] == "SUCCEEDED", run
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]  # 1 + 2 across the two ranks
    for r in ranks:
        assert r["WORLD_SIZE"] == "2" and r["GROUP_RANK"] == "0"
        assert (r["CORRAL_NUM_NODES"], r["CORRAL_NODE_RANK"]) == ("1", "0")
        assert (r["NNODES"], r["NODE_RANK"], r["PET_NNODES"], r["PET_NODE_RANK"]) == (
            "1",
            "0",
            "1",
            "0",
        )
        assert r["CORRAL_MASTER_ADDR"] == r["MASTER_ADDR"] == "127.0.0.1"
        # torchrun's ranks meet on the port corral picked (torchrun puts its store there)
        assert r["MASTER_PORT"] == r["CORRAL_MASTER_PORT"] != "29500"
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert (plain["CORRAL_NUM_NODES"], plain["CORRAL_NODE_RANK"]) == ("1", "0")
    assert plain["CORRAL_MASTER_ADDR"] == "127.0.0.1"
    assert plain["MASTER_PORT"] == plain["CORRAL_MASTER_PORT"] == plain["PET_MASTER_PORT"]
    assert int(plain["CORRAL_MASTER_PORT"]) > 0
    pinned = json.loads((tmp_path / "pinned.json").read_text())
    assert pinned["MASTER_PORT"] == pinned["CORRAL_MASTER_PORT"] == "29123"
    assert os.environ.get("MASTER_PORT") is None  # nothing leaked into the test's own env
