"""A gang on EC2 (moto, with the placement groups :mod:`.moto_placement` adds and the refusal to
delete a security group in use :mod:`.moto_security_groups` adds): every node in one
availability zone, the run's cluster placement group and the run's own security group, which
admits the run's nodes to one another and holds no other instance, each node tagged with its
rank and launched once per key, the head reached at its private address; both groups deleted
with the run once its instances are gone; and a half-formed gang (the head launched, the next
node without capacity) released by the controller with nothing left behind."""

from __future__ import annotations

import uuid

import pytest

from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.errors import BadInput, NoCapacity, NotYetTerminated, ProviderError
from corral.providers.aws import placement
from corral.providers.base import Instance
from corral.store import Store
from support.waiting import wait_until

from ..contract import new_key
from .harness import MotoAws
from .test_botocore_validation import PlayedMachines
from .test_provider import bootstrap, gang_bootstrap, pick


def _tags(item: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags") or []}


def _cidr() -> str:
    """A controller address of the test's own: its security group is not another test's
    (the moto server is shared, and the single-node tests check their group's rules)."""
    n = uuid.uuid4().int
    return f"198.51.{n % 250}.{(n >> 8) % 250 + 1}/32"


def _gone(provider, instance: Instance) -> None:
    def terminated() -> bool:
        try:
            provider.terminate(instance)
        except NotYetTerminated:
            return False
        return True

    wait_until(terminated, 20, 0.1, message=f"{instance.instance_id} terminated")


def _groups(aws: MotoAws, run_id: str) -> list[dict]:
    return aws.client().describe_placement_groups(
        Filters=[{"Name": "tag:corral:run", "Values": [run_id]}]
    )["PlacementGroups"]


def _security_groups(aws: MotoAws, run_id: str) -> list[dict]:
    """The security groups tagged with the run (its gang's own)."""
    return aws.client().describe_security_groups(
        Filters=[{"Name": "tag:corral:run", "Values": [run_id]}]
    )["SecurityGroups"]


def _in_group(aws: MotoAws, group_id: str) -> set[str]:
    """The ids of the instances not terminated that are in the security group."""
    return {
        i["InstanceId"]
        for i in aws.instances(Filters=[{"Name": "instance.group-id", "Values": [group_id]}])
        if i["State"]["Name"] != "terminated"
    }


def _rules(aws: MotoAws, group_id: str) -> dict[tuple[int, int, str], dict]:
    (group,) = aws.client().describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    return {(r["FromPort"], r["ToPort"], r["IpProtocol"]): r for r in group["IpPermissions"]}


def test_a_two_node_gang_is_one_zone_one_cluster_group_and_a_security_group_of_the_run_s_own(
    make_provider, aws, owner, tmp_path
):
    cidr = _cidr()
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=cidr)
    offer = pick(p, spot=False)
    head_key = new_key()
    run_id = head_key.rsplit("-a", 1)[0]
    assert p.launches_gangs and p.gang_port(run_id) == 29500
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    address = p.gang_address(head)
    # the node's place, as the controller gives it: the head's private address
    member_key = f"{head_key}-k1"
    member = p.launch(offer, gang_bootstrap(tmp_path, member_key, 1, address), member_key)

    items = {i["InstanceId"]: i for i in aws.live_instances(owner)}
    assert set(items) == {head.instance_id, member.instance_id}
    assert address == items[head.instance_id]["PrivateIpAddress"]
    assert len({i["Placement"]["AvailabilityZone"] for i in items.values()}) == 1
    assert {i["Placement"]["GroupName"] for i in items.values()} == {f"corral-{run_id}"}
    (group,) = _groups(aws, run_id)
    assert group["GroupName"] == f"corral-{run_id}" and group["Strategy"] == "cluster"
    assert _tags(group)["corral:owner"] == owner
    # each node's rank on its instance, and in what listing and find return
    assert {_tags(i)["corral:node-rank"] for i in items.values()} == {"0", "1"}
    assert (head.data["rank"], member.data["rank"]) == (0, 1)
    assert p.find(member_key).data["rank"] == 1
    assert {i.data["rank"] for i in p.list_instances()} == {0, 1}
    # the nodes' security group is the run's own: all TCP from itself, and the agent's port
    # from the controller as a single node's group has it
    (sg,) = {g["GroupId"] for i in items.values() for g in i["SecurityGroups"]}
    (own,) = _security_groups(aws, run_id)
    assert (own["GroupId"], own["GroupName"]) == (sg, f"corral-gang-{run_id}")
    assert _tags(own)["corral:owner"] == owner
    by_peer = _rules(aws, sg)
    assert set(by_peer) == {(0, 65535, "tcp"), (7450, 7450, "tcp")}
    between = by_peer[0, 65535, "tcp"]
    assert [pair["GroupId"] for pair in between["UserIdGroupPairs"]] == [sg]
    assert between["IpRanges"] == []
    assert by_peer[7450, 7450, "tcp"]["UserIdGroupPairs"] == []
    assert [r["CidrIp"] for r in by_peer[7450, 7450, "tcp"]["IpRanges"]] == [cidr]
    # only the run's nodes are in it: not a single node of the same controller, whose group
    # admits nothing between its instances, nor another run's gang, which has a group of its own
    single_key = new_key()
    single = p.launch(offer, bootstrap(tmp_path, single_key), single_key)
    other_key = new_key()
    other = p.launch(offer, gang_bootstrap(tmp_path, other_key, 0), other_key)
    assert _in_group(aws, sg) == {head.instance_id, member.instance_id}
    (single_item,) = aws.instances(InstanceIds=[single.instance_id])
    (single_sg,) = [g["GroupId"] for g in single_item["SecurityGroups"]]
    assert single_sg != sg
    assert [r["UserIdGroupPairs"] for r in _rules(aws, single_sg).values()] == [[]]
    (other_group,) = _security_groups(aws, other_key.rsplit("-a", 1)[0])
    assert other_group["GroupId"] not in (sg, single_sg)
    assert _in_group(aws, other_group["GroupId"]) == {other.instance_id}
    for inst in (head, member, single, other):
        _gone(p, inst)


def test_a_node_s_key_launches_one_instance_and_a_restarted_provider_finds_the_head_s_zone(
    make_provider, aws, owner, tmp_path
):
    cidr = _cidr()
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=cidr)
    offer = pick(p, spot=False)
    head_key = new_key()
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    key = f"{head_key}-k1"
    first = p.launch(offer, gang_bootstrap(tmp_path, key, 1, p.gang_address(head)), key)
    again = p.launch(offer, gang_bootstrap(tmp_path, key, 1, p.gang_address(head)), key)
    assert again.instance_id == first.instance_id
    assert len(aws.instances(Filters=[{"Name": "tag:corral:key", "Values": [key]}])) == 1
    # a controller restarted between two nodes: its provider knows nothing of the head
    # but what EC2 says (the attempt's rank-0 instance, by its tags)
    later = make_provider(machine_runner=PlayedMachines(), controller_cidr=cidr)
    record = Instance.model_validate(head.model_dump() | {"data": {"region": "us-east-1"}})
    address = later.gang_address(record)  # asked of EC2: the record has no address
    assert address == head.data["private_ip"]
    third_key = f"{head_key}-k2"
    third = later.launch(offer, gang_bootstrap(tmp_path, third_key, 2, address), third_key)
    zones = {i["Placement"]["AvailabilityZone"] for i in aws.live_instances(owner)}
    assert zones == {head.data["zone"]} and third.data["zone"] == head.data["zone"]
    assert third.data["placement_group"] == head.data["placement_group"]
    # its rule between the nodes was asked for again, and is there once
    (sg,) = {g["GroupId"] for i in aws.live_instances(owner) for g in i["SecurityGroups"]}
    rules = aws.client().describe_security_groups(GroupIds=[sg])["SecurityGroups"][0]
    pairs = [p["GroupId"] for r in rules["IpPermissions"] for p in r["UserIdGroupPairs"]]
    assert pairs == [sg]
    for inst in (head, first, third):
        _gone(p, inst)


def test_a_repaired_gang_s_new_node_joins_the_kept_nodes_zone_and_group_whatever_its_rank(
    make_provider, aws, owner, tmp_path
):
    """A repair keeps the survivors (tagged with the attempt they were launched for): a new
    node 1 of attempt 2 finds the kept head; a new head of attempt 2 goes into the kept
    node's zone (an on-demand offer names none: EC2 would pick one, maybe not the group's)."""
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    offer = pick(p, spot=False)
    head_key = new_key()
    run_id = head_key.rsplit("-a", 1)[0]
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    member = p.launch(
        offer, gang_bootstrap(tmp_path, f"{head_key}-k1", 1, p.gang_address(head)), f"{head_key}-k1"
    )
    zone = head.data["zone"]
    (group,) = _security_groups(aws, run_id)

    def second(key: str, rank: int, address: str = "127.0.0.1"):
        bs = gang_bootstrap(tmp_path, key, rank, address)
        plan = bs.plan.model_copy(update={"attempt": 2})
        return bs.model_copy(update={"plan": plan})

    # node 1 lost: attempt 2's node 1 joins the kept head (a provider that never saw it)
    _gone(p, member)
    later = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    key = f"{run_id}-a2-k1"
    new = later.launch(offer, second(key, 1, p.gang_address(head)), key)
    assert (new.data["zone"], new.data["placement_group"]) == (zone, f"corral-{run_id}")
    # then the head lost: attempt 2's head joins the kept node 1
    _gone(p, head)
    key = f"{run_id}-a2"
    new_head = later.launch(offer, second(key, 0), key)
    assert (new_head.data["zone"], new_head.data["placement_group"]) == (zone, f"corral-{run_id}")
    tags = {_tags(i)["corral:key"]: _tags(i) for i in aws.live_instances(owner)}
    assert {k: (t["corral:node-rank"], t["corral:attempt"]) for k, t in tags.items()} == {
        f"{run_id}-a2-k1": ("1", "2"),
        f"{run_id}-a2": ("0", "2"),
    }
    # both in the run's security group, which the repair kept (the kept head was in it)
    assert _in_group(aws, group["GroupId"]) == {new.instance_id, new_head.instance_id}
    # the provider of another controller address: admitted to the agents of the kept nodes too
    sources = {r["CidrIp"] for r in _rules(aws, group["GroupId"])[7450, 7450, "tcp"]["IpRanges"]}
    assert len(sources) == 2
    for inst in (new, new_head):
        _gone(p, inst)
    p.release_run(run_id)
    assert _groups(aws, run_id) == [] and _security_groups(aws, run_id) == []


def test_each_node_has_a_data_volume_of_its_own_and_named_volumes_are_refused(
    make_provider, aws, owner, tmp_path
):
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr(), data_volume_gb=10)
    offer = pick(p, spot=False)
    head_key = new_key()
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    key = f"{head_key}-k1"
    member = p.launch(offer, gang_bootstrap(tmp_path, key, 1, p.gang_address(head)), key)
    volumes = [head.data["volume_id"], member.data["volume_id"]]
    assert None not in volumes and volumes[0] != volumes[1]  # an EBS volume: one instance
    found = aws.client().describe_volumes(VolumeIds=volumes)["Volumes"]
    ranks = {v["VolumeId"]: _tags(v).get("corral:node-rank", "0") for v in found}
    assert ranks == {volumes[0]: "0", volumes[1]: "1"}
    # the node of rank 1 of a later gang of the run, in that zone, finds its volume again
    _gone(p, member)
    again_key = f"{head_key}-k1x"
    again = p.launch(offer, gang_bootstrap(tmp_path, again_key, 1, p.gang_address(head)), again_key)
    assert again.data["volume_id"] == volumes[1]
    for inst in (head, again):
        _gone(p, inst)
    p.release_run(head.data["run_id"])
    # named volumes (spec.volumes) cannot be mounted by several instances: one clear line
    named = offer.model_copy(
        update={
            "details": {**offer.details, "volumes": [{"name": "v", "size_gb": 1, "mount": "/d"}]}
        }
    )
    other = new_key()
    with pytest.raises(BadInput, match=r"multi-node job cannot mount named volumes \(volumes\)"):
        p.launch(named, gang_bootstrap(tmp_path, other, 0), other)


def test_a_node_without_its_head_is_refused_before_anything_is_rented(
    make_provider, aws, owner, tmp_path
):
    p = make_provider(
        machine_runner=PlayedMachines(), controller_cidr=_cidr(), sleep=lambda s: None
    )
    offer = pick(p, spot=False)
    key = f"{new_key()}-k1"
    with pytest.raises(ProviderError, match=r"the head \(node 0\) .* is not running"):
        p.launch(offer, gang_bootstrap(tmp_path, key, 1, "10.0.0.9"), key)
    assert aws.live_instances(owner) == []


def test_the_run_s_group_goes_once_its_instances_are_gone_a_half_formed_gang_included(
    make_provider, aws, owner, tmp_path
):
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    offer = pick(p, spot=False)
    head_key = new_key()
    run_id = head_key.rsplit("-a", 1)[0]
    aws.placement.limit(f"corral-{run_id}", 1)  # the group's rack holds one machine
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    key = f"{head_key}-k1"
    with pytest.raises(NoCapacity, match="InsufficientInstanceCapacity"):
        p.launch(offer, gang_bootstrap(tmp_path, key, 1, p.gang_address(head)), key)
    assert [i["InstanceId"] for i in aws.live_instances(owner)] == [head.instance_id]
    with pytest.raises(NotYetTerminated, match=f"corral-{run_id} still holds instances"):
        p.release_run(run_id)  # the head is still in it
    with pytest.raises(NotYetTerminated, match=f"corral-gang-{run_id} still holds instances"):
        p.release_security_groups(run_id)  # EC2 refuses to delete a group in use
    assert len(_groups(aws, run_id)) == 1 and len(_security_groups(aws, run_id)) == 1
    _gone(p, head)
    p.release_run(run_id)
    assert _groups(aws, run_id) == [] and aws.live_instances(owner) == []
    assert _security_groups(aws, run_id) == []
    p.release_run(run_id)  # again: nothing to do


def test_the_leak_sweep_deletes_the_empty_groups_of_runs_that_are_over(
    make_provider, aws, owner, tmp_path
):
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    offer = pick(p, spot=False)
    keys = [new_key(), new_key()]
    heads = [p.launch(offer, gang_bootstrap(tmp_path, k, 0), k) for k in keys]
    over, active = (k.rsplit("-a", 1)[0] for k in keys)
    _gone(p, heads[0])
    # the run still active keeps its groups; the one over loses its, once empty
    swept = p.sweep([keys[1]], [active], min_age_s=0)
    assert {f"corral-{over}", f"corral-gang-{over}"} <= set(swept)
    assert not {f"corral-{active}", f"corral-gang-{active}"} & set(swept)
    assert _groups(aws, over) == [] and len(_groups(aws, active)) == 1
    assert _security_groups(aws, over) == [] and len(_security_groups(aws, active)) == 1
    # a group still holding an instance is left for the next sweep
    swept = p.sweep([keys[1]], [], min_age_s=0)
    assert not {f"corral-{active}", f"corral-gang-{active}"} & set(swept)
    _gone(p, heads[1])
    assert {f"corral-{active}", f"corral-gang-{active}"} <= set(p.sweep([], [], min_age_s=0))
    assert _security_groups(aws, active) == []


def test_which_types_a_cluster_group_takes(make_provider):
    for itype, takes in {
        "g5.xlarge": True,
        "p5.48xlarge": True,
        "c4.large": True,
        "t3.micro": False,
        "mac1.metal": False,
        "m7i-flex.large": False,
        "p2.xlarge": False,
    }.items():
        assert placement.cluster_by_doc(itype) is takes, itype
    p = make_provider()
    # EC2's own answer (describe_instance_types' PlacementGroupInfo), moto's copy of it
    assert placement.supports_cluster(p.ec2, "us-east-1", "g6e.xlarge") is True
    assert placement.supports_cluster(p.ec2, "us-east-1", "t3.micro") is False


@pytest.mark.slow
def test_a_half_formed_gang_is_released_by_the_controller_and_nothing_is_left(
    make_provider, aws, owner, tmp_path
):
    from control.helpers import submit, tick_until, write_spec

    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hello')\n")
    spec = write_spec(
        work,
        """
        name: half-gang
        run: python train.py
        resources: {gpus: "A10G:1", nodes: 2, spot: false, providers: [aws]}
        """,
    )
    run_id = submit(spec)
    aws.placement.limit(f"corral-{run_id}", 1)
    store = Store.open()
    controller = Controller(Context(store=store, providers={"aws": p}, settings=Settings()))
    tick_until(
        controller,
        store,
        run_id,
        lambda run: bool(store.events(run_id, types=["gang.incomplete"])),
        timeout=60,
    )
    (note,) = store.events(run_id, types=["gang.incomplete"])
    assert "node 1 of 2 could not be had" in note.reason, note.reason
    first = store.get_attempt(run_id, 1)
    assert first.exit_reason == "gang_incomplete"

    def head_released() -> bool:
        controller.tick()
        rows = [r for r in store.resources(run_id=run_id) if r.attempt == 1]
        return bool(rows) and all(r.state == "gone" for r in rows)

    wait_until(head_released, 30, 0.1, message="attempt 1's nodes released")
    store.request_action(run_id, "cancel")
    run = tick_until(controller, store, run_id, lambda run: run.terminal, timeout=60)
    assert run.state == "CANCELLED"
    assert store.resources(run_id=run_id, open_only=True) == []
    assert aws.live_instances(owner) == []
    # the run's placement group and security group went with the run (release_run, once
    # its nodes were gone)
    assert _groups(aws, run_id) == [] and _security_groups(aws, run_id) == []
