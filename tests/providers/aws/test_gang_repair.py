"""A gang on EC2 repaired (moto, machines played on this machine with their real agents, an
in-process controller): node 1's spot instance reclaimed, the head's instance is kept and only
node 1 is launched again, into the same zone, cluster placement group and the run's security
group, tagged with its rank; the run succeeds on the repaired gang and its end leaves no
instance and no group. Where EC2 cannot place the replacement (``InsufficientInstanceCapacity``
in the group), the whole gang is relaunched and the run says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.helpers import submit, tick_until, write_spec
from corral.control import gang_history, gangs
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.store import Store

from .harness import MotoAws
from .test_gang import _cidr, _groups, _security_groups, _tags

pytestmark = pytest.mark.slow

JOB = """
import os, time
node, attempt = os.environ["CORRAL_NODE_RANK"], os.environ["CORRAL_ATTEMPT"]
print(f"node {node} of {os.environ['CORRAL_NUM_NODES']} runs attempt {attempt}", flush=True)
if attempt == "1":
    time.sleep(120)  # until the gang loses a node
"""


def _gang_run(tmp_path: Path, make_provider) -> tuple[str, Store, Controller]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    spec = write_spec(
        work,
        """
        name: gang-repair
        run: python job.py
        resources: {gpus: "A10G:1", nodes: 2, spot: true, providers: [aws]}
        recovery: {max_preemption_restarts: 3}
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    p = make_provider(controller_cidr=_cidr())
    controller = Controller(Context(store=store, providers={"aws": p}, settings=Settings()))
    tick_until(controller, store, run_id, lambda run: run.state == "RUNNING", timeout=90)
    return run_id, store, controller


def _rows(store: Store, run_id: str) -> dict[tuple[int, int], object]:
    return {
        (r.attempt, r.data["rank"]): r
        for r in store.resources(run_id=run_id)
        if r.instance_id and "rank" in r.data
    }


def _ended_clean(aws: MotoAws, owner: str, store: Store, run_id: str) -> None:
    assert store.resources(run_id=run_id, open_only=True) == []
    assert aws.live_instances(owner) == []
    # release_run, once every node was terminated: the placement group and security group
    assert _groups(aws, run_id) == [] and _security_groups(aws, run_id) == []


def test_a_reclaimed_node_is_replaced_in_the_gang_s_zone_and_group_the_head_kept(
    tmp_path: Path, make_provider, aws: MotoAws, owner: str, runner
) -> None:
    run_id, store, controller = _gang_run(tmp_path, make_provider)
    first = _rows(store, run_id)
    head, lost = first[1, 0], first[1, 1]
    (group,) = _security_groups(aws, run_id)  # the run's own, while it runs
    aws.reclaim(lost.instance_id, runner=runner)  # EC2 takes node 1's spot instance back
    run = tick_until(controller, store, run_id, lambda run: run.terminal, timeout=120)
    assert run.state == "SUCCEEDED", run.reason
    attempts = store.attempts(run_id)
    assert [a.exit_reason for a in attempts] == ["preempted", "succeeded"]
    rows = _rows(store, run_id)
    # the head's instance went on into attempt 2; node 1 is a new one
    assert rows[2, 0].instance_id == head.instance_id
    assert rows[2, 1].instance_id not in (head.instance_id, lost.instance_id)
    (kept,) = store.events(run_id, types=["gang.node_kept"])
    assert kept.data == {"node": 0, "instance_id": head.instance_id}
    assert not store.events(run_id, types=["gang.relaunched"])
    launched = [e.data["instance_id"] for e in store.events(run_id, types=["instance.launched"])]
    assert launched == [head.instance_id, lost.instance_id, rows[2, 1].instance_id]
    # the replacement: the head's zone and the run's group, tagged rank 1 of attempt 2
    (new,) = aws.instances(InstanceIds=[rows[2, 1].instance_id])
    (old,) = aws.instances(InstanceIds=[head.instance_id])
    assert new["Placement"]["AvailabilityZone"] == old["Placement"]["AvailabilityZone"]
    assert new["Placement"]["GroupName"] == old["Placement"]["GroupName"] == f"corral-{run_id}"
    assert (_tags(new)["corral:node-rank"], _tags(new)["corral:attempt"]) == ("1", "2")
    # in the run's security group, which the repair kept, the kept head in it
    assert {g["GroupId"] for g in new["SecurityGroups"]} == {group["GroupId"]}
    assert {g["GroupId"] for g in old["SecurityGroups"]} == {group["GroupId"]}
    # each node's history (the manifest's node_attempts): its machines, zone and ends
    zone = old["Placement"]["AvailabilityZone"]
    history = gang_history.history(controller.ctx, run)
    assert [(n.rank, n.attempt, n.instance_id, n.region, n.zone, n.ended) for n in history] == [
        (0, 1, head.instance_id, "us-east-1", zone, "kept"),
        (0, 2, head.instance_id, "us-east-1", zone, None),
        (1, 1, lost.instance_id, "us-east-1", zone, "preempted"),
        (1, 2, rows[2, 1].instance_id, "us-east-1", zone, None),
    ]
    # billed for both nodes of the repaired gang, each at the offer's spot price (the
    # attempt's price, what its cost and the agents' cost meter count)
    price = rows[2, 1].data["offer"]["price_per_hour"]
    assert rows[2, 0].data["offer"]["price_per_hour"] == price
    assert attempts[1].price_per_hour == pytest.approx(2 * price)
    _ended_clean(aws, owner, store, run_id)


def test_a_replacement_ec2_cannot_place_relaunches_the_whole_gang_saying_why(
    tmp_path: Path, make_provider, aws: MotoAws, owner: str, runner, monkeypatch
) -> None:
    monkeypatch.setattr(gangs, "GANG_RETRY_S", 0.2)  # the next gang at once
    run_id, store, controller = _gang_run(tmp_path, make_provider)
    first = _rows(store, run_id)
    group = f"corral-{run_id}"
    aws.placement.limit(group, 1)  # the group's rack: full with the head alone
    aws.reclaim(first[1, 1].instance_id, runner=runner)
    tick_until(
        controller,
        store,
        run_id,
        lambda run: bool(store.events(run_id, types=["gang.incomplete"])),
        timeout=90,
    )
    aws.placement.capacity.pop(group)  # room again, for a whole new gang
    run = tick_until(controller, store, run_id, lambda run: run.terminal, timeout=120)
    assert run.state == "SUCCEEDED", run.reason
    attempts = store.attempts(run_id)
    assert [a.exit_reason for a in attempts] == ["preempted", "gang_incomplete", "succeeded"]
    (incomplete,) = store.events(run_id, types=["gang.incomplete"])
    assert "node 1 of 2 could not be had" in incomplete.reason, incomplete.reason
    (said,) = store.events(run_id, types=["gang.relaunched"])
    assert said.reason == "the repaired gang was not completed: the gang is relaunched whole"
    claims = [e.reason for e in store.events(run_id, types=["run.state"]) if e.attempt == 3]
    assert any("launching attempt 3" in r and said.reason in r for r in claims), claims
    rows = _rows(store, run_id)
    assert rows[2, 0].instance_id == first[1, 0].instance_id  # kept, then released
    assert (2, 1) not in rows  # never placed
    assert {rows[3, 0].instance_id, rows[3, 1].instance_id}.isdisjoint(
        {first[1, 0].instance_id, first[1, 1].instance_id}
    )
    history = gang_history.history(controller.ctx, run)
    assert [(n.rank, n.attempt, n.instance_id, n.ended) for n in history] == [
        (0, 1, first[1, 0].instance_id, "kept"),
        (0, 2, first[1, 0].instance_id, "gang_incomplete"),
        (0, 3, rows[3, 0].instance_id, None),
        (1, 1, first[1, 1].instance_id, "preempted"),
        (1, 3, rows[3, 1].instance_id, None),
    ]
    _ended_clean(aws, owner, store, run_id)
