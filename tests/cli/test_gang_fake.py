"""A multi-node job on the simulated cloud (``resources.nodes: 2``): ``corral launch`` rents a
gang of two machines, each its own machine root, and an unmodified ``torchrun`` command meets
across them (gloo on CPU over loopback) with no rendezvous flag; the run is billed for both
machines, and every machine is gone at the end. One node preempted: every rank saves its part
of a sharded checkpoint (on the cloud's volume of the run, which both machines mount), the
gang is repaired - the surviving machine is kept, only the lost one is launched again - and
the job ends with the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from corral.providers.base import Instance
from corral.providers.fake import ENV_FAKE_CLOUD
from corral.providers.fake.provider import FakeProvider
from corral.store import Store
from support.gang_jobs import ALL_REDUCE as TRAIN
from support.gang_jobs import SHARDED, TWO_NODE_SPEC

from .helpers import wait_state
from .test_debug import cli, write_spec

STATES = ("RUNNING", "SUCCEEDED", "FAILED")

pytest.importorskip("torch.distributed")


SPEC = TWO_NODE_SPEC.replace("PROVIDER", "fake")

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
    # every node's log, each line saying its node; --node one of them
    assert "node1/train" in logs and "rank 1 of 2 node 1 sum 3.0" in logs, logs
    code, one, _ = cli("logs", run_id, "--node", "1")
    assert code == 0 and "rank 1 of 2 node 1" in one and "rank 0 of 2" not in one, one
    assert "report" not in one  # a head-only stage: skipped on node 1, no log there
    code, _, err = cli("logs", run_id, "--node", "2")
    assert code != 0 and err.strip().endswith("has no node 2 (nodes: 0..1)"), err
    store = Store.open()
    (started,) = store.events(run_id, types=["run.started"])
    assert started.data == {"nodes": 2} and started.reason == "attempt 1 running on 2 nodes"
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
    # corral status: a row per node, its machine, state and cost
    nodes = run["nodes"]
    assert [(n["rank"], n["instance_id"], n["state"]) for n in nodes] == [
        (e.data["node"], e.data["instance_id"], "gone") for e in launched
    ]
    assert all(n["cost_usd"] > 0 and n["provider"] == "fake" and not n["kept"] for n in nodes)
    code, shown, _ = cli("status", run_id)
    assert code == 0 and "NODE" in shown and all(m in shown for m in machines), shown


RELAUNCH_SPEC = """
name: gang-preempted
resources: {nodes: 2, providers: [fake]}
env: {OMP_NUM_THREADS: 1}
run: torchrun --nproc-per-node 1 train.py
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lost", "repair"),
    [(1, True), (0, True), (1, False)],
    ids=["node-1-lost", "head-lost", "relaunched-whole"],
)
def test_a_node_preempted_is_replaced_the_survivor_kept_and_the_weights_are_uninterrupted(
    lost: int, repair: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(With repairs off, CORRAL_GANG_REPAIR=off: the whole gang relaunched, the run's reason
    saying why while it launches, the same weights.)"""
    if not repair:
        monkeypatch.setenv("CORRAL_GANG_REPAIR", "off")
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({**CLOUD, "notice_s": 20.0}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    (tmp_path / "train.py").write_text(SHARDED)
    store_dir = tmp_path / "results"  # the head writes the run's manifest there
    spec = RELAUNCH_SPEC + f"artifacts: {{storage: {store_dir}}}\n"
    code, out, err = cli("launch", write_spec(tmp_path, spec), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    store = Store.open()
    deadline = time.monotonic() + 120
    while not [e for e in store.events(run_id, types=["checkpoint.saved"]) if e.attempt == 1]:
        assert time.monotonic() < deadline, "no checkpoint was saved"
        now = wait_state(run_id, set(STATES), timeout=60)
        # (a run that ended here says why: its reason and its last events)
        said = [(e.attempt, e.type, e.reason) for e in store.events(run_id)][-12:]
        assert now["state"] == "RUNNING", (now.get("reason"), said)
        time.sleep(0.2)
    # corral exec reaches each node (its own machine: its own workdir)
    for flag, said in (([], "0"), (["--node", "1"], "1")):
        code, out, err = cli("exec", run_id, *flag, "--", "cat", "node.txt")
        assert (code, out.strip()) == (0, said), (flag, out, err)
    (node,) = [
        r for r in store.resources(run_id=run_id) if r.attempt == 1 and r.data.get("rank") == lost
    ]
    FakeProvider().preempt(Instance.model_validate(node.instance), grace=20.0)
    run = wait_state(run_id, {"SUCCEEDED", "FAILED"}, timeout=180)
    _, logs, _ = cli("logs", run_id)
    assert run["state"] == "SUCCEEDED", (run, logs)
    first, *_ = store.attempts(run_id)
    assert first.exit_reason == "preempted", first
    (recovering,) = store.events(run_id, types=["run.recovering"])
    assert "preempted" in recovering.reason, recovering
    assert lost == 0 or f"node {lost}" in recovering.reason, recovering
    assert recovering.data.get("node") == (lost or None)  # the webhook's data.node
    assert "rank 0 stops at step" in logs
    resumed = [line for line in logs.splitlines() if "rank 0 of 2 starts at step" in line]
    assert resumed[0].endswith("starts at step 0") and not resumed[-1].endswith("step 0"), logs
    # each element: sum over 40 steps of (1 + 2) * step, exactly as without the preemption
    assert "final " + ",".join(["2460"] * 8) in logs, logs
    rows = {(r.attempt, r.data.get("rank")): r for r in store.resources(run_id=run_id)}
    # the manifest: each node's attempts, its machine in each and how each ended for it
    manifest = json.loads((store_dir / run_id / "manifest.json").read_text())
    assert manifest["nodes"] == 2 and manifest["attempt"] == 2
    history = {
        (node["rank"], a["attempt"]): (a["instance_id"], a["ended"], a["provider"])
        for node in manifest["node_attempts"]
        for a in node["attempts"]
    }
    survivor = 1 - lost
    first_ends = {lost: "preempted", survivor: "kept" if repair else "released"}
    assert history == {
        (rank, n): (
            rows[(n, rank)].instance_id,
            first_ends[rank] if n == 1 else "succeeded",
            "fake",
        )
        for rank in (0, 1)
        for n in (1, 2)
    }, manifest["node_attempts"]
    if not repair:  # two new machines, and the reason of the relaunch's claim says why
        assert {rows[(2, 0)].instance_id, rows[(2, 1)].instance_id}.isdisjoint(
            {rows[(1, 0)].instance_id, rows[(1, 1)].instance_id}
        )
        (said,) = store.events(run_id, types=["gang.relaunched"])
        claims = [e.reason for e in store.events(run_id, types=["run.state"]) if e.attempt == 2]
        assert any("launching attempt 2" in r and said.reason in r for r in claims), claims
        assert "CORRAL_GANG_REPAIR=off" in said.reason
        assert not store.events(run_id, types=["gang.node_kept"])
        return
    # the repair: the survivor's machine is the same in both attempts, the lost node's new
    assert rows[(2, survivor)].instance_id == rows[(1, survivor)].instance_id
    assert rows[(2, lost)].instance_id not in (rows[(1, 1)].instance_id, rows[(1, 0)].instance_id)
    (kept,) = store.events(run_id, types=["gang.node_kept"])
    assert kept.data == {"node": survivor, "instance_id": rows[(1, survivor)].instance_id}
    assert store.events(run_id, types=["gang.handed_over"])
    launched = [e.data["instance_id"] for e in store.events(run_id, types=["instance.launched"])]
    assert len(launched) == 3  # two machines, then only the lost one again
    # the survivor's machine ran both attempts: each attempt's events are stored once, under
    # it, and its attempt-2 log is attempt 2's output alone
    starts = [e.attempt for e in store.events(run_id, types=["attempt.started"])]
    ends = [e.attempt for e in store.events(run_id, types=["attempt.finished"])]
    assert starts == [1, 2] and ends.count(2) == 1 and ends.count(1) <= 1, (starts, ends)
    code, again, err = cli("logs", run_id, "--attempt", "2", "--node", str(survivor))
    assert code == 0 and f"rank {survivor} of 2 starts at step" in again, (again, err)
    assert "starts at step 0" not in again and "stops at step" not in again, again


@pytest.mark.slow
def test_a_gang_not_ready_within_its_bound_is_released_saying_what_was_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No node boots within CORRAL_GANG_TIMEOUT: every machine the gang had is released
    (billed until then), the run says how many were ready, and it waits for the next gang."""
    cloud = tmp_path / "cloud.json"
    cloud.write_text(json.dumps({**CLOUD, "launch_delay_s": 30}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    monkeypatch.setenv("CORRAL_GANG_TIMEOUT", "2")
    (tmp_path / "train.py").write_text(TRAIN)
    code, out, err = cli("launch", write_spec(tmp_path, SPEC), "--detach", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    store = Store.open()
    deadline = time.monotonic() + 60
    while not store.events(run_id, types=["gang.incomplete"]):
        assert time.monotonic() < deadline, store.events(run_id)
        time.sleep(0.2)
    (said,) = store.events(run_id, types=["gang.incomplete"])
    assert said.reason.startswith("the gang was not completed: 0 of 2 nodes ready after "), said
    assert "(the bound is 2s: CORRAL_GANG_TIMEOUT); releasing its nodes" in said.reason
    first = {e.data["instance_id"] for e in store.events(run_id, types=["instance.launched"])
             if e.attempt == 1}  # fmt: skip
    assert len(first) == 2

    def released() -> bool:
        gone = {
            e.reason.split(": ")[-1] for e in store.events(run_id, types=["instance.terminated"])
        }
        return first <= gone

    deadline = time.monotonic() + 60
    while not released():
        assert time.monotonic() < deadline, store.events(run_id)
        time.sleep(0.2)
    attempt = store.attempts(run_id)[0]
    assert attempt.exit_reason == "gang_incomplete" and attempt.cost_usd > 0  # billed till then
    # the next gang is not tried at once (10 s, doubling after each gang that could not form)
    time.sleep(3)
    assert len(store.attempts(run_id)) == 1
    assert store.get_run(run_id).reason.startswith("the gang could not form: trying again in ")
    code, _, err = cli("cancel", run_id)
    assert code == 0, err
    assert wait_state(run_id, {"CANCELLED"}, timeout=60)["state"] == "CANCELLED"
