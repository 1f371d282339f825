"""A gang's security group on EC2 (moto, refusing to delete a group in use as EC2 does:
:mod:`.moto_security_groups`), beyond what ``test_gang.py`` shows: a group a crashed launch
left without its rules is found and completed, and a group EC2 still refuses to delete when no
instance is in it holds the run's end for a while, then is the leak sweep's."""

from __future__ import annotations

import logging
import time

import pytest

from corral.errors import NotYetTerminated
from corral.providers.aws import gang_group, network
from corral.providers.aws.housekeeping import GROUP_RELEASE_WAIT_S

from ..contract import new_key
from .harness import REGION
from .test_botocore_validation import PlayedMachines
from .test_gang import _cidr, _gone, _groups, _in_group, _rules, _security_groups
from .test_provider import gang_bootstrap, pick


def test_a_run_s_group_left_by_a_crash_before_its_rules_is_found_and_completed(
    make_provider, aws, owner, tmp_path
):
    """A controller that died between creating the run's group and adding its rules: the
    next launch finds the group by its name in the VPC, adds what it lacks, and makes no
    second one."""
    p = make_provider(machine_runner=PlayedMachines(), controller_cidr=_cidr())
    offer = pick(p, spot=False)
    head_key = new_key()
    run_id = head_key.rsplit("-a", 1)[0]
    # what the launch of a controller that died then had done: the group, made by corral
    tags = {"corral:run": run_id, "corral:owner": owner, "corral:managed": "true"}
    vpc = p.launcher.vpc(REGION)
    name = gang_group.group_name(run_id)
    left = network.ensure_group(p.ec2, REGION, vpc, name, "left by a crash", tags)["GroupId"]
    assert _rules(aws, left) == {}
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    assert _in_group(aws, left) == {head.instance_id}
    assert set(_rules(aws, left)) == {(0, 65535, "tcp"), (7450, 7450, "tcp")}
    # the next node finds it whole: no second group, no rule twice
    key = f"{head_key}-k1"
    member = p.launch(offer, gang_bootstrap(tmp_path, key, 1, p.gang_address(head)), key)
    assert _in_group(aws, left) == {head.instance_id, member.instance_id}
    named = aws.client().describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}]
    )["SecurityGroups"]
    assert [g["GroupId"] for g in named] == [left]
    assert [len(r["UserIdGroupPairs"]) for r in named[0]["IpPermissions"]] in ([0, 1], [1, 0])
    for inst in (head, member):
        _gone(p, inst)
    p.release_run(run_id)
    assert _security_groups(aws, run_id) == []


def test_a_group_ec2_refuses_with_no_instance_in_it_holds_the_run_s_end_a_while_then_the_sweep_s(
    make_provider, aws, owner, tmp_path, caplog
):
    """EC2 refuses to delete a group another group's rule names (as it does a group whose
    terminated instance's network interface it has not deleted yet): the run's end waits up
    to GROUP_RELEASE_WAIT_S for it, then goes on, and the leak sweep deletes the group once
    EC2 lets it go."""
    now = [time.time()]
    p = make_provider(
        machine_runner=PlayedMachines(), controller_cidr=_cidr(), clock=lambda: now[0]
    )
    offer = pick(p, spot=False)
    head_key = new_key()
    run_id = head_key.rsplit("-a", 1)[0]
    head = p.launch(offer, gang_bootstrap(tmp_path, head_key, 0), head_key)
    (group,) = _security_groups(aws, run_id)
    ec2 = aws.client()
    other = ec2.create_security_group(
        GroupName=f"names-{run_id}", Description="names the run's group", VpcId=group["VpcId"]
    )["GroupId"]
    naming = {
        "IpProtocol": "tcp",
        "FromPort": 22,
        "ToPort": 22,
        "UserIdGroupPairs": [{"GroupId": group["GroupId"]}],
    }
    ec2.authorize_security_group_ingress(GroupId=other, IpPermissions=[naming])
    _gone(p, head)
    with pytest.raises(NotYetTerminated, match=f"corral-gang-{run_id} is still in use"):
        p.release_run(run_id)
    now[0] += GROUP_RELEASE_WAIT_S - 1
    with pytest.raises(NotYetTerminated):
        p.release_run(run_id)
    now[0] += 2
    with caplog.at_level(logging.WARNING, logger="corral.providers.aws"):
        p.release_run(run_id)  # the run's end goes on
    assert "the leak sweep deletes it" in caplog.text
    assert _groups(aws, run_id) == [] and len(_security_groups(aws, run_id)) == 1
    assert f"corral-gang-{run_id}" not in p.sweep([], [], min_age_s=0)
    ec2.revoke_security_group_ingress(GroupId=other, IpPermissions=[naming])
    assert f"corral-gang-{run_id}" in p.sweep([], [], min_age_s=0)
    assert _security_groups(aws, run_id) == []
    ec2.delete_security_group(GroupId=other)
