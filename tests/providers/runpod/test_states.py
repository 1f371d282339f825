"""Every pod state mapped to an InstanceState; a spot pod RunPod interrupts is PREEMPTED and
its agent gets SIGTERM before the kill; stop and start; the agent answers through the proxy."""

from __future__ import annotations

import pytest

from corral.control.agent_client import AgentClient
from corral.errors import AgentError
from corral.providers.base import InstanceState
from corral.providers.runpod.pods import Pod, pod_state
from corral.wire.status import AgentStatus, Phase
from support.waiting import wait_until

from ..contract import new_key, wait_state
from .helpers import bootstrap, offer

S = InstanceState


@pytest.mark.parametrize(
    ("fields", "spot", "stopped_by_corral", "state", "detail"),
    [
        ({"status": "RUNNING", "runtime": {"uptime": 3}}, False, False, S.RUNNING, "running"),
        ({"desiredStatus": "RUNNING"}, True, False, S.RUNNING, "running"),  # GraphQL's word
        ({"status": "PROVISIONING"}, False, False, S.PROVISIONING, "provisioning"),
        ({"status": "STARTING"}, False, False, S.PROVISIONING, "starting"),
        ({"desiredStatus": "CREATED"}, False, False, S.PROVISIONING, "created"),
        ({"status": "EXITED"}, True, False, S.PREEMPTED, "interrupted"),
        ({"status": "EXITED"}, True, True, S.STOPPED, "by corral"),
        ({"status": "EXITED"}, False, True, S.STOPPED, "by corral"),
        ({"status": "EXITED"}, False, False, S.FAILED, "stopped by RunPod"),
        ({"desiredStatus": "PAUSED"}, True, False, S.PREEMPTED, "interrupted"),
        ({"status": "ERROR"}, False, False, S.FAILED, "error"),
        ({"desiredStatus": "DEAD"}, False, False, S.FAILED, "dead"),
        ({"status": "TERMINATED"}, False, False, S.TERMINATED, "terminated"),
        ({"status": "MIGRATING"}, False, False, S.UNKNOWN, "MIGRATING"),
        ({}, False, False, S.UNKNOWN, "(none)"),
    ],
)
def test_every_pod_state_maps_to_an_instance_state(fields, spot, stopped_by_corral, state, detail):
    pod = Pod.model_validate({"id": "p1", "unknown-field": 1, **fields})
    got, text = pod_state(pod, spot=spot, stopped_by_corral=stopped_by_corral)
    assert got == state and detail in text


def test_no_pod_is_terminated():
    assert pod_state(None, spot=False) == (S.TERMINATED, "no such pod")


def test_pod_env_and_cost_are_read_from_rest_v2_and_graphql_shapes():
    assert Pod.model_validate({"id": "p", "env": {"A": "1"}}).env_value("A") == "1"
    assert Pod.model_validate({"id": "p", "env": ["A=1=2", "B=3"]}).env_value("A") == "1=2"
    assert Pod.model_validate({"id": "p"}).env_value("A") is None
    assert Pod.model_validate({"id": "p", "cost": 0.44}).cost == 0.44
    assert Pod.model_validate({"id": "p", "costPerHr": 0.2}).cost == 0.2


def agent_status(endpoint: str, token: str) -> AgentStatus:
    def ask():
        try:
            return AgentClient(endpoint, token, timeout=2.0).status()
        except AgentError:
            return None

    return wait_until(ask, message="the agent through the proxy")


def test_running_pod_serves_the_agent_through_runpods_proxy(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key)
    inst = p.launch(offer(p, spot=False), bs, key)
    st = wait_state(p, inst, S.RUNNING)
    assert st.endpoint == f"{fake.base_url}/proxy/{inst.instance_id}-8750" == inst.endpoint
    assert agent_status(st.endpoint, bs.token).phase in (Phase.SETUP, Phase.RUNNING)
    with pytest.raises(AgentError, match="rejected the controller's token"):
        AgentClient(st.endpoint, "wrong-token").status()


def test_pod_whose_container_is_not_up_is_provisioning_with_its_endpoint(
    make_provider, fake, tmp_path
):
    fake.cloud.boot_delay = 30.0
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    st = p.status(inst)
    assert st.state == S.PROVISIONING and st.detail == "pod provisioning"
    assert st.endpoint == inst.endpoint
    assert fake.routes("graphql:") == []  # v2's status says it all


def test_interrupted_spot_pod_is_preempted_and_its_agent_stops_gracefully(
    make_provider, fake, tmp_path
):
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key)
    inst = p.launch(offer(p, spot=True), bs, key)
    wait_state(p, inst, S.RUNNING)
    agent_status(inst.endpoint, bs.token)
    container = fake.cloud.pods[inst.instance_id].proc
    fake.interrupt(inst.instance_id, notice=5.0)
    st = p.status(inst)
    assert st.state == S.PREEMPTED and "interrupted by RunPod" in st.detail
    assert st.endpoint is None
    wait_until(lambda: container.poll() is not None, timeout=4.5, message="the agent to exit")
    assert container.returncode == 0  # SIGTERM handled before the SIGKILL
    p.terminate(inst)
    assert p.status(inst).state == S.TERMINATED


def test_on_demand_pod_stopped_by_runpod_is_failed(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    fake.cloud.stop(inst.instance_id, reason="Balance reached $0")
    st = p.status(inst)
    assert st.state == S.FAILED and "stopped by RunPod, not by corral" in st.detail


@pytest.mark.parametrize("spot", [False, True])
def test_stop_is_stopped_and_start_runs_the_pod_again(make_provider, fake, tmp_path, spot):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=spot), bootstrap(tmp_path, key), key)
    wait_state(p, inst, S.RUNNING)
    p.stop(inst)
    assert p.status(inst).state == S.STOPPED
    assert make_provider().status(inst).state == S.STOPPED  # remembered on disk
    p.start(inst)
    wait_state(p, inst, S.RUNNING)
    if spot:  # a spot pod bids again; a later interruption is a preemption, not a stop
        assert "graphql:podBidResume" in fake.routes()
        fake.interrupt(inst.instance_id, 0.0)
        assert p.status(inst).state == S.PREEMPTED
    else:
        assert (
            fake.routes(f"POST /v2/pods/{inst.instance_id}/action")
            == [f"POST /v2/pods/{inst.instance_id}/action"] * 2
        )  # stop, then start
    p.stop(inst)
    p.stop(inst)  # a 409 (already EXITED) is fine
    assert p.status(inst).state == S.STOPPED


def test_a_command_runs_in_the_pod_through_runpods_proxy(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key)
    inst = p.launch(offer(p, spot=False), bs, key)
    st = wait_state(p, inst, S.RUNNING)
    agent_status(st.endpoint, bs.token)
    client = AgentClient(st.endpoint, bs.token, timeout=5.0)
    command = client.exec_start(["sh", "-c", "echo in-pod $RUNPOD_POD_ID; exit 4"])
    page = wait_until(
        lambda: (r := client.exec_read(command))["done"] and r, message="the command to end"
    )
    assert page["data"] == f"in-pod {inst.instance_id}\n" and page["exit_code"] == 4
    assert "POST /exec" in [r.removeprefix("proxy ") for r in fake.routes("proxy ")]
