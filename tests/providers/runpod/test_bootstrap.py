"""What a pod is created with and what runs in it: the create bodies, the plan and token in
the pod's env, the start script, the pod-side boot module, the network volume for
checkpoints, and a pod that terminates itself when its job ended and no controller calls."""

from __future__ import annotations

import json
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from corral.agent.boot import ENV_BOOT, ENV_PARTS, Delivered, delivery_env, take_delivery
from corral.errors import BadInput, NoCapacity, ProviderError
from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.providers.common.wheel import bootstrap_script
from corral.providers.runpod import boot
from corral.providers.runpod.bootstrap import (
    BOOT_ARGS,
    ENV_BIND,
    ENV_REST_URL,
    start_command,
    start_script,
)
from corral.providers.runpod.graphql import EnumValue, literal
from corral.providers.runpod.settings import RunPodSettings
from corral.wire.env import ENV_AGENT_TOKEN
from corral.wire.plan import AgentPlan
from support.waiting import wait_until

from ..contract import new_key, provider_plan, wait_state
from . import fake_graphql
from .fake_server import API_KEY
from .helpers import bootstrap, offer

REQ = Requirements(gpu_type="L40S", gpu_count_min=2, cpus=16, memory_gb=64, disk_gb=200)


def test_on_demand_create_body_starts_the_agent_with_plan_and_token_in_env(
    make_provider, fake, tmp_path
):
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key, env={"HF_TOKEN": "hf_secret_value"})
    p.launch(
        offer(p, spot=False, req=REQ.model_copy(update={"cpus": None, "memory_gb": None})), bs, key
    )
    body = fake.creates[-1]  # REST v2's CreatePodRequest (checked against the document)
    assert body["name"] == f"corral-{key}" and body["gpu"] == {"id": "NVIDIA L40S", "count": 2}
    assert body["disk"] == 200 and body["cloud"] in ("SECURE", "COMMUNITY")
    assert body["ports"] == ["8750/http"] and "dataCenterIds" not in body
    # the node bootstrap (corral of this version, else installed), then the pod's boot
    # in RunPod's documented JSON form: an explicit entrypoint, every argument one string
    start = json.loads(body["args"])
    assert start["entrypoint"] == ["bash", "-c"] and start["cmd"][0] == bootstrap_script()
    assert start["cmd"][1:] == ["corral-boot", "-m", "corral.providers.runpod.boot", "agent"]
    env = body["env"]
    assert env[ENV_REST_URL] == fake.settings()["rest_url"]  # the shutdown command's API
    # the plan, token and job env in the one delivery format, nothing of them in plain sight
    assert bs.token not in str(env) and "hf_secret_value" not in str(env)
    delivered = take_delivery(dict(env))
    assert (delivered.token, delivered.env) == (bs.token, {"HF_TOKEN": "hf_secret_value"})
    assert delivered.plan == bs.plan.model_dump(mode="json")  # delivered as built, never edited


def test_a_pods_plan_binds_every_interface_on_the_agent_port(make_provider, tmp_path):
    p = make_provider()
    key = new_key()
    o = offer(p, spot=False, req=REQ)
    profile = p.node_profile(o, key[:-3])
    assert (profile.host, profile.port, profile.controller_timeout_s) == ("0.0.0.0", 8750, 1800.0)
    assert profile.checkpoint_dir is None and profile.node_hooks == []
    plan = provider_plan(p, o, tmp_path, key)  # what the controller builds from it
    assert (plan.host, plan.port, plan.run_id) == ("0.0.0.0", 8750, key[:-3])
    assert plan.controller_timeout_s == 1800.0  # the controller's own setting wins if given


def test_spot_create_is_a_graphql_bid_at_the_offer_price(make_provider, fake, tmp_path):
    p = make_provider()
    key = new_key()
    o = offer(p, spot=True, req=REQ)
    p.launch(o, bootstrap(tmp_path, key), key)
    inp = fake.creates[-1]
    assert inp["bidPerGpu"] == o.details["bid_per_gpu"] == o.price_per_hour / 2
    assert (inp["gpuCount"], inp["minVcpuCount"], inp["minMemoryInGb"]) == (2, 16, 64)
    assert inp["cloudType"] == o.details["cloud_type"] and inp["ports"] == "8750/http"
    assert json.loads(inp["dockerArgs"]) == json.loads(fake.creates[-1]["dockerArgs"])
    assert json.loads(inp["dockerArgs"])["entrypoint"] == ["bash", "-c"]
    assert {e["key"] for e in inp["env"]} >= {f"{ENV_BOOT}_0", ENV_PARTS}


def test_on_demand_create_keeps_the_jobs_cpu_and_memory_minimums(make_provider, fake, tmp_path):
    """REST v2 has no field for a GPU pod's host minimums: such a pod is created through
    GraphQL's podFindAndDeployOnDemand, with minVcpuCount and minMemoryInGb for all its GPUs."""
    p = make_provider()
    key = new_key()
    o = offer(p, spot=False, req=REQ)
    p.launch(o, bootstrap(tmp_path, key), key)
    inp = fake.creates[-1]
    assert fake.routes("graphql:") == ["graphql:podFindAndDeployOnDemand"]
    assert fake.routes("POST /v2/pods") == []
    assert (inp["gpuCount"], inp["minVcpuCount"], inp["minMemoryInGb"]) == (2, 16, 64)
    assert "bidPerGpu" not in inp and inp["gpuTypeId"] == "NVIDIA L40S"
    assert json.loads(inp["dockerArgs"])["entrypoint"] == ["bash", "-c"]
    [pod] = fake.cloud.list()
    assert not pod.interruptible and pod.gpu_count == 2
    # no host has that many vCPUs per GPU: no pod, the next offer
    big = REQ.model_copy(update={"cpus": 1000})
    other = new_key()
    with pytest.raises(NoCapacity):
        p.launch(offer(p, spot=False, req=big), bootstrap(tmp_path, other), other)
    assert len(fake.cloud.list()) == 1


def test_graphql_literals_carry_any_string_unchanged():
    nasty = 'a "quoted" } ) {x: 1}\nline\\ \u00e9\u2028 $var #'
    doc = f"mutation {{ podRentInterruptable(input: {literal({'name': nasty, 'env': [{'key': 'K', 'value': nasty}], 'cloudType': EnumValue('SECURE'), 'bidPerGpu': 0.2, 'gpuCount': 2, 'ok': True, 'none': None})}) {{ id }} }}"
    _, field, args, _ = fake_graphql.parse(doc, {})
    assert field == "podRentInterruptable"
    assert args["input"] == {
        "name": nasty,
        "env": [{"key": "K", "value": nasty}],
        "cloudType": "SECURE",
        "bidPerGpu": 0.2,
        "gpuCount": 2,
        "ok": True,
        "none": None,
    }
    with pytest.raises(ValueError):
        literal(EnumValue("SECURE } evil"))
    with pytest.raises(ValueError):
        literal({"bad key": 1})


def test_network_volume_holds_the_checkpoints_and_pins_the_data_center(
    make_provider, fake, tmp_path
):
    volume = make_provider().create_volume("ckpts", 50, "EU-RO-1")
    mount = tmp_path / "volume"
    p = make_provider(network_volume_id=volume["id"], volume_mount_path=str(mount))
    offers = p.offers(Requirements(gpu_type="L40S", gpu_count_min=1))
    assert offers and {o.region for o in offers} == {"EU-RO-1"}
    assert p.offers(Requirements(gpu_count_min=1, regions=["US-TX-3"])) == []
    key = new_key()
    o = next(o for o in offers if not o.spot)
    (tmp_path / "w").mkdir()
    plan = provider_plan(p, o, tmp_path / "w", key).model_copy(update={"host": "127.0.0.1"})
    bs = Bootstrap(plan=plan, token="tok-" + key)
    inst = p.launch(o, bs, key)
    body = fake.creates[-1]
    assert body["mounts"] == {"network": [{"volumeId": volume["id"], "path": str(mount)}]}
    assert body["dataCenterIds"] == ["EU-RO-1"]
    checkpoints = mount / "corral" / key[:-3] / "checkpoints"
    assert take_delivery(dict(body["env"])).plan["checkpoint_dir"] == str(checkpoints)
    wait_state(p, inst, InstanceState.RUNNING)
    # the pod mounts the volume at `mount` in its own filesystem; its files are the volume's
    on_volume = fake.cloud.volume_dir(volume["id"]) / "corral" / key[:-3] / "checkpoints"
    wait_until(on_volume.is_dir, message="the agent to create the checkpoint directory")
    assert [v["id"] for v in p.volumes()] == [volume["id"]]
    with pytest.raises(ProviderError, match="attached to pod"):
        p.delete_volume(volume["id"])
    p.terminate(inst)
    p.delete_volume(volume["id"])
    p.delete_volume(volume["id"])  # a missing volume is fine
    assert p.volumes() == []


def test_a_missing_network_volume_is_bad_input(make_provider):
    with pytest.raises(BadInput, match="network volume 'vol404' does not exist"):
        make_provider(network_volume_id="vol404").offers(Requirements(gpu_count_min=1))


def test_boot_writes_the_plan_privately_and_binds_where_told(tmp_path):
    plan = bootstrap(tmp_path / "work", "rboot-a1", host="0.0.0.0", port=8750).plan
    delivered = Delivered(plan=plan.model_dump(mode="json"), token="t")
    env = {**delivery_env(delivered), ENV_BIND: "127.0.0.1:5555"}
    argv = boot.start_agent(env, exec_agent=False)
    path = Path(argv[-1])
    assert argv[-2] == "--plan" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert AgentPlan.load(path) == plan  # the plan as built; the node's facts are arguments
    assert argv[argv.index("--bind") + 1] == "127.0.0.1:5555"
    shutdown = argv[argv.index("--shutdown-command") + 1]
    assert shutdown.endswith("-m corral.providers.runpod.boot shutdown")
    assert env[ENV_AGENT_TOKEN] == "t"  # the agent takes it out of its environment
    assert ENV_PARTS not in env and f"{ENV_BOOT}_0" not in env  # the plan leaves it
    with pytest.raises(SystemExit, match="CORRAL_BOOT_PARTS is not set"):
        boot.start_agent({}, exec_agent=False)
    with pytest.raises(SystemExit, match="do not hold a plan"):
        boot.start_agent({ENV_PARTS: "1", f"{ENV_BOOT}_0": "bm90IGd6aXA="}, exec_agent=False)


def test_shutdown_terminates_its_pod_through_the_api(make_provider, fake, tmp_path, capsys):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    other = p.launch(offer(p, spot=False), bootstrap(tmp_path, new_key()), new_key())
    pod_key = fake.pod_key(inst.instance_id)  # what RunPod puts in the pod: its own key
    env = {
        "RUNPOD_POD_ID": inst.instance_id,
        "RUNPOD_API_KEY": pod_key,
        ENV_REST_URL: fake.settings()["rest_url"],
        "PATH": "/nonexistent",
    }
    # the pod's key reaches no other pod (the fake's reading of "pod-scoped")
    assert boot.terminate_pod({**env, "RUNPOD_POD_ID": other.instance_id}) == 1
    assert boot.terminate_pod(env) == 0
    assert [q.id for q in fake.cloud.list()] == [other.instance_id]
    assert p.status(inst).state == InstanceState.TERMINATED
    assert boot.terminate_pod({**env, "RUNPOD_API_KEY": ""}) == 1  # no key, no runpodctl
    assert boot.terminate_pod({}) == 1
    err = capsys.readouterr().err
    assert API_KEY not in err and pod_key not in err


#: runpodctl v2 as far as a pod uses it: `runpodctl pod delete <id>` with the pod's key
#: (docs runpodctl/reference/runpodctl-pod); v1's `remove pod` is an unknown command
FAKE_RUNPODCTL = """#!{python}
import os, sys, urllib.request
if sys.argv[1:3] != ["pod", "delete"] or len(sys.argv) != 4:
    print(f'Error: unknown command "{{sys.argv[1]}}" for "runpodctl"', file=sys.stderr)
    sys.exit(1)
req = urllib.request.Request(
    os.environ["FAKE_RUNPOD_API"] + "/pods/" + sys.argv[3],
    method="DELETE",
    headers={{"Authorization": "Bearer " + os.environ["RUNPOD_API_KEY"],
             "User-Agent": "runpodctl/2.0.0"}},
)
urllib.request.urlopen(req, timeout=10)
print("pod " + sys.argv[3] + " deleted")
"""


def test_a_pod_that_cannot_reach_the_api_deletes_itself_with_runpodctl_v2(
    make_provider, fake, tmp_path, capsys
):
    p = make_provider()
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path, key), key)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ctl = bindir / "runpodctl"
    ctl.write_text(FAKE_RUNPODCTL.format(python=sys.executable))
    ctl.chmod(0o755)
    with socket.socket() as s:  # a port nothing listens on: the API cannot be reached
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v2"
    env = {
        "RUNPOD_POD_ID": inst.instance_id,
        "RUNPOD_API_KEY": fake.pod_key(inst.instance_id),
        ENV_REST_URL: dead,
        "PATH": str(bindir),
        "FAKE_RUNPOD_API": fake.settings()["rest_url"],
    }
    assert boot.terminate_pod(env) == 0
    assert fake.cloud.list() == [] and p.status(inst).state == InstanceState.TERMINATED
    assert f"DELETE /v2/pods/{inst.instance_id}" in fake.routes()
    assert "terminated (runpodctl)" in capsys.readouterr().err


def test_a_pod_whose_job_ended_terminates_itself_without_a_controller(
    make_provider, fake, tmp_path
):
    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key, run="true", controller_timeout_s=0.5)
    inst = p.launch(offer(p, spot=False), bs, key)
    wait_until(lambda: not fake.cloud.list(), timeout=20, message="the pod to terminate itself")
    assert f"DELETE /v2/pods/{inst.instance_id}" in fake.routes()
    assert p.status(inst).state == InstanceState.TERMINATED


def _fake_python(bindir: Path, has_corral: bool) -> Path:
    bindir.mkdir(parents=True, exist_ok=True)
    py = bindir / "python3"
    importable = "exit 0" if has_corral else "exit 1"
    # answers the bootstrap's version probe (-c) as a python 3.12, its corral probe (-) as told
    py.write_text(
        '#!/bin/sh\nif [ "$1" = "-c" ]; then echo 3.12; exit 0; fi\n'
        f'if [ "$1" = "-" ]; then {importable}; fi\necho "$@" > ran.txt\n'
    )
    py.chmod(0o755)
    return py


def test_the_start_command_runs_install_command_only_when_corral_is_missing(tmp_path):
    """``install_command`` (an advanced override) runs before the node bootstrap, only when
    the image's python cannot import corral; then the pod's boot module runs."""
    _fake_python(tmp_path / "bin", has_corral=True)
    argv = start_command(RunPodSettings(install_command="touch installed.txt"))
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "installed.txt").exists()
    assert (tmp_path / "ran.txt").read_text().split() == list(BOOT_ARGS)


def test_start_script_without_python_says_so(tmp_path):
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run(
        [bash, "-c", start_script(RunPodSettings())],
        env={"PATH": str(tmp_path)},  # no python anywhere
        capture_output=True,
        text=True,
    )
    assert done.returncode == 78 and "no python on this machine" in done.stderr


@pytest.mark.parametrize("spot", [False, True])
def test_the_agent_starts_in_an_image_with_an_entrypoint_of_its_own(
    make_provider, fake, tmp_path, spot
):
    """The start command replaces the image's ENTRYPOINT (RunPod's JSON form): the image's own
    (a model server that takes what it is given as its arguments) never runs."""
    from corral.providers.base import ImageRef

    from .fake_cloud import ENTRYPOINT_RAN, IMAGE_WITH_ENTRYPOINT

    p = make_provider()
    key = new_key()
    bs = bootstrap(tmp_path, key).model_copy(update={"image": ImageRef(name=IMAGE_WITH_ENTRYPOINT)})
    inst = p.launch(offer(p, spot=spot), bs, key)
    [pod] = fake.cloud.list()
    assert pod.image == IMAGE_WITH_ENTRYPOINT and pod.argv[:2] == ["bash", "-c"]
    path = fake.cloud.log_path(pod.id)
    # the agent answers through RunPod's proxy: it runs in the pod
    ua = {"User-Agent": "corral-test/1"}
    health = inst.endpoint + "/health"
    wait_until(lambda: httpx.get(health, headers=ua, timeout=2).status_code == 200, timeout=60)
    assert ENTRYPOINT_RAN not in path.read_text()
    p.terminate(inst)
