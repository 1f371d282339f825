"""How container groups map onto InstanceState on the fake SaladCloud: no notice, so an
interrupted replica (back to allocating, or on another machine) is a preemption; stops by
corral and by others; the shared listing serving many runs."""

from __future__ import annotations

import time

import pytest

from corral.errors import Conflict, NotFound
from corral.providers.base import Instance, InstanceState
from corral.providers.salad.bootstrap import ENV_KEY, ENV_OFFER, group_name
from corral.providers.salad.groups import ContainerGroup, SaladInstance, group_state
from support.waiting import wait_until

from ..contract import new_key, wait_state
from .helpers import bootstrap, offer


def _launch(provider, tmp_path, run: str = "sleep 60") -> Instance:
    key = new_key()
    chosen = offer(provider)
    return provider.launch(chosen, bootstrap(provider, chosen, tmp_path / key, key, run), key)


def test_an_interrupted_replica_is_preempted_with_both_machines_in_the_detail(
    make_provider, fake, tmp_path
):
    provider = make_provider()
    inst = _launch(provider, tmp_path)
    wait_state(provider, inst, InstanceState.RUNNING)
    first = fake.cloud.groups[inst.instance_id].replica.machine_id
    fake.interrupt(inst.instance_id)
    st = wait_state(provider, inst, InstanceState.PREEMPTED)
    assert first in st.detail
    # once on the new machine it stays a preemption (this attempt's machine is gone)
    wait_until(lambda: fake.cloud.replica_port(inst.instance_id), message="the new replica")
    time.sleep(0.6)  # past the instance cache
    st = provider.status(inst)
    assert st.state == InstanceState.PREEMPTED
    second = fake.cloud.groups[inst.instance_id].replica.machine_id
    assert f"from machine {first} to {second}" in st.detail
    provider.terminate(inst)
    assert provider.status(inst).state == InstanceState.TERMINATED


def test_a_controller_restart_keeps_the_first_machine(make_provider, fake, tmp_path):
    provider = make_provider()
    inst = _launch(provider, tmp_path)
    wait_state(provider, inst, InstanceState.RUNNING)
    fake.interrupt(inst.instance_id)
    wait_until(lambda: fake.cloud.replica_port(inst.instance_id), message="the new replica")
    restarted = make_provider()  # same CORRAL_HOME: it remembers the first machine
    assert restarted.status(inst).state == InstanceState.PREEMPTED
    restarted.terminate(inst)


def test_stop_and_start_by_corral_and_a_stop_by_someone_else(make_provider, fake, tmp_path):
    provider = make_provider()
    inst = _launch(provider, tmp_path)
    wait_state(provider, inst, InstanceState.RUNNING)
    provider.stop(inst)
    wait_state(provider, inst, InstanceState.STOPPED)
    provider.start(inst)
    wait_state(provider, inst, InstanceState.RUNNING)  # a new machine, not a preemption
    fake.cloud.stop(inst.instance_id)  # from the portal
    st = wait_state(provider, inst, InstanceState.FAILED)
    assert "outside corral" in st.detail
    provider.terminate(inst)


def test_simulated_preemption_reallocates_the_running_instance(make_provider, fake, tmp_path):
    provider = make_provider()
    inst = _launch(provider, tmp_path)
    with pytest.raises(Conflict):
        provider.preempt(inst)  # nothing runs yet
    wait_state(provider, inst, InstanceState.RUNNING)
    provider.preempt(inst)
    wait_state(provider, inst, InstanceState.PREEMPTED)
    logs = [e["event_name"] for e in fake.cloud.groups[inst.instance_id].logs]
    assert "Instance Reallocated by User" in logs
    provider.terminate(inst)
    with pytest.raises(NotFound):
        provider.preempt(inst)


def test_the_states_table():
    def group(status: str, **counts: int) -> ContainerGroup:
        return ContainerGroup.model_validate(
            {"name": "g", "current_state": {"status": status, "instance_status_counts": counts}}
        )

    def state(g, replica=None, first=None, stopped=False):
        return group_state(
            g, replica, first_machine=first, ran_before=bool(first), stopped_by_corral=stopped
        )[0]

    running = SaladInstance(state="running", machine_id="m1")
    allocating = SaladInstance(state="allocating")
    S = InstanceState
    assert state(None) == S.TERMINATED
    assert state(group("pending")) == S.PROVISIONING
    assert state(group("failed")) == S.FAILED
    assert state(group("succeeded")) == S.FAILED
    assert state(group("stopped"), stopped=True) == S.STOPPED
    assert state(group("stopped")) == S.FAILED
    assert state(group("deploying"), allocating) == S.PROVISIONING
    assert state(group("Running"), running) == S.RUNNING  # case does not matter
    assert state(group("running"), running, first="m1") == S.RUNNING
    assert state(group("running"), running, first="m0") == S.PREEMPTED
    assert state(group("running"), allocating, first="m1") == S.PREEMPTED
    assert state(group("running"), SaladInstance(state="stopping"), stopped=True) == S.STOPPED
    assert state(group("exploding")) == S.UNKNOWN
    assert state(group("running"), SaladInstance(state="levitating")) == S.UNKNOWN


def test_one_listing_serves_every_run_and_instances_are_read_only_while_running(
    make_provider, fake, tmp_path
):
    launcher = make_provider()
    runs = [_launch(launcher, tmp_path) for _ in range(3)]
    for inst in runs:
        wait_state(launcher, inst, InstanceState.RUNNING)
    provider = make_provider(list_cache_s=30.0, instances_cache_s=30.0)  # a controller's
    before = len(fake.routes())
    for _ in range(20):
        for inst in runs:
            assert provider.status(inst).state == InstanceState.RUNNING
    # 60 status calls: one listing and one instance list per running group
    # the controller's calls to the API (the containers' own metadata-service calls aside)
    calls = [r for r in fake.routes()[before:] if not r.startswith("imds ")]
    assert len(calls) == 4, calls
    assert sum(c.endswith("/containers") for c in calls) == 1
    for inst in runs:
        provider.terminate(inst)


def test_the_leak_sweep_deletes_only_old_groups_no_run_knows(make_provider, fake, tmp_path):
    provider = make_provider(sweep_min_age_s=0)
    kept, leaked = _launch(provider, tmp_path), _launch(provider, tmp_path)
    assert make_provider(sweep_min_age_s=3600).sweep({kept.key}) == []  # too young
    assert provider.sweep({kept.key}) == [leaked.instance_id]
    assert list(fake.cloud.groups) == [kept.instance_id]
    provider.terminate(kept)


def test_a_restarted_controller_reads_the_priority_at_the_top_level(make_provider, fake, tmp_path):
    provider = make_provider()
    key = new_key()
    chosen = offer(provider, priority="high")
    inst = provider.launch(chosen, bootstrap(provider, chosen, tmp_path, key), key)
    # a group whose offer did not fit in its environment: rebuilt from the group itself
    del fake.cloud.groups[inst.instance_id].body["container"]["environment_variables"][ENV_OFFER]
    found = make_provider().find(key)  # a restarted controller
    assert found is not None
    assert found.offer.details["priority"] == "high" and found.offer.spot is False
    assert found.offer.details["gpu_class_id"] == chosen.details["gpu_class_id"]
    provider.terminate(inst)


def test_the_leak_sweep_sees_every_group_past_the_first_page(make_provider, fake):
    keys = [f"r{i:03d}leak-a1" for i in range(130)]
    for key in keys:  # stopped groups (no container runs): corral's, no run knows them
        fake.cloud.create(
            {
                "name": group_name(key),
                "autostart_policy": False,
                "restart_policy": "never",
                "replicas": 1,
                "container": {
                    "image": "python:3.11",
                    "resources": {"cpu": 1, "memory": 1024},
                    "environment_variables": {ENV_KEY: key},
                },
            },
            imds="",
        )
    provider = make_provider(sweep_min_age_s=0)
    assert sorted(i.key for i in provider.list_instances()) == keys
    pages = [r for r in fake.routes("GET ") if r.endswith("/containers")]
    assert len(pages) == 2  # 100 + 30
    assert len(provider.sweep(keys[:5])) == 125
    assert sorted(fake.cloud.groups) == sorted(group_name(k) for k in keys[:5])
