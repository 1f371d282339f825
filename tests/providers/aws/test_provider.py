"""The AWS provider against a moto server on loopback: the provider contract, what a launch
asks EC2 for, idempotency after timeouts, spot notices and reclaims, terminate, find, the leak
sweep, and a controller killed between "create instance" and "record instance"."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import httpx
import pytest
from botocore import exceptions as bx

from corral.errors import (
    InfeasibleRequest,
    NoCapacity,
    NotYetTerminated,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
)
from corral.providers.aws.placement import GANG_PORT
from corral.providers.aws.provider import AwsProvider
from corral.providers.aws.userdata import NOTICE_HOOK, extract_payload
from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.wire.gang import GangRole
from support.waiting import wait_until

from ..contract import ProviderContract, new_key, provider_plan, trivial_plan
from .harness import ACCESS_KEY, SECRET_KEY
from .test_notices import JOB

A10G = Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=1)


def bootstrap(tmp_path: Path, key: str, run: str = "sleep 60", **env: str) -> Bootstrap:
    plan = trivial_plan(tmp_path, key, run)
    return Bootstrap(plan=plan.model_dump(mode="json"), token="tok-" + uuid.uuid4().hex, env=env)


def gang_bootstrap(tmp_path: Path, key: str, rank: int, head: str = "127.0.0.1") -> Bootstrap:
    """What the controller gives node ``rank`` of a gang (control/launching.py): its place
    in the bootstrap and the agent's environment."""
    bs = bootstrap(tmp_path, key)
    role = GangRole(rank=rank, master_addr=head, master_port=GANG_PORT)
    return bs.model_copy(update={"gang": role, "env": {**bs.env, **role.env()}})


def pick(provider: AwsProvider, spot: bool, itype: str = "g5.xlarge", **req: object):
    offers = provider.offers(A10G.model_copy(update={"spot": spot, **req}))
    return next(o for o in offers if o.details["instance_type"] == itype)


def wait_status(provider, inst, states, timeout: float = 30.0):
    seen = []

    def reached():
        seen[:] = [provider.status(inst)]
        return seen[0].state in states and seen[0]

    return wait_until(
        reached, timeout, 0.1, lambda: f"{states}; still {seen[0].state} {seen[0].detail}"
    )


class TestAwsContract(ProviderContract):
    @pytest.fixture
    def provider(self, make_provider):
        return make_provider()

    @pytest.fixture
    def requirements(self) -> Requirements:
        return A10G


def test_spot_launch_asks_ec2_for_exactly_what_the_job_needs(make_provider, owner, aws, tmp_path):
    p = make_provider()
    offer = pick(p, spot=True, disk_gb=250.0)
    key = new_key()
    bs = bootstrap(tmp_path, key, HF_TOKEN="hf-secret")
    inst = p.launch(offer, bs, key)
    ec2 = aws.client()
    item = aws.instances(InstanceIds=[inst.instance_id])[0]
    assert item["InstanceLifecycle"] == "spot" and item["InstanceType"] == "g5.xlarge"
    assert item["Placement"]["AvailabilityZone"] == offer.details["zone"]
    assert item["ClientToken"] == key
    tags = {t["Key"]: t["Value"] for t in item["Tags"]}
    assert tags["corral:key"] == key and tags["corral:run"] == key.rsplit("-a", 1)[0]
    assert tags["corral:attempt"] == "1" and tags["corral:owner"] == owner
    assert item["MetadataOptions"]["HttpTokens"] == "required"
    shutdown = ec2.describe_instance_attribute(
        InstanceId=inst.instance_id, Attribute="instanceInitiatedShutdownBehavior"
    )
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    root = item["BlockDeviceMappings"][0]["Ebs"]
    volume = ec2.describe_volumes(VolumeIds=[root["VolumeId"]])["Volumes"][0]
    assert volume["Size"] == 250 and volume["VolumeType"] == "gp3" and root["DeleteOnTermination"]
    raw = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
    payload = extract_payload(base64.b64decode(raw["UserData"]["Value"]).decode())
    assert payload.plan == bs.plan  # delivered as the controller built it
    profile = p.node_profile(offer, inst.data["run_id"])
    assert profile.shutdown_command == "shutdown -h now"
    assert profile.node_hooks == [NOTICE_HOOK] and profile.port == 7450
    assert payload.env == {"HF_TOKEN": "hf-secret"}
    groups = ec2.describe_security_groups(GroupIds=[g["GroupId"] for g in item["SecurityGroups"]])
    rules = [r for g in groups["SecurityGroups"] for r in g["IpPermissions"]]
    assert rules == [
        {
            "IpProtocol": "tcp",
            "FromPort": 7450,
            "ToPort": 7450,
            "IpRanges": [{"CidrIp": "203.0.113.7/32", "Description": "corral controller"}],
            "Ipv6Ranges": [],
            "PrefixListIds": [],
            "UserIdGroupPairs": [],
        }
    ]


def test_on_demand_launch_has_no_spot_options_and_no_notice_hook(make_provider, aws, tmp_path):
    p = make_provider(root_volume_gb=120)
    key = new_key()
    offer = pick(p, spot=False)
    assert p.node_profile(offer, "r").node_hooks == []
    inst = p.launch(offer, bootstrap(tmp_path, key), key)
    item = aws.instances(InstanceIds=[inst.instance_id])[0]
    assert "InstanceLifecycle" not in item
    raw = aws.client().describe_instance_attribute(
        InstanceId=inst.instance_id, Attribute="userData"
    )
    assert (
        extract_payload(base64.b64decode(raw["UserData"]["Value"]).decode()).plan.node_hooks == []
    )
    root = aws.client().describe_volumes(
        VolumeIds=[item["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]]
    )["Volumes"][0]
    assert root["Size"] == 120  # no disk asked: the configured least size


def _on_run_instances(p: AwsProvider, stage: str, handler) -> None:
    p.ec2.client("us-east-1").meta.events.register(f"{stage}-call.ec2.RunInstances", handler)


def test_a_launch_retried_after_a_timeout_finds_the_first_instance(
    make_provider, owner, aws, tmp_path
):
    p = make_provider(sleep=lambda s: None)
    calls = []

    def lost_answer(**kw):  # EC2 created it, the answer never came back
        calls.append(1)
        if len(calls) == 1:
            raise bx.ReadTimeoutError(endpoint_url=aws.url)

    _on_run_instances(p, "after", lost_answer)
    key = new_key()
    inst = p.launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    assert len(calls) == 1, "the instance was found by its tag; no second run_instances"
    assert [i["InstanceId"] for i in aws.live_instances(owner)] == [inst.instance_id]
    again = make_provider().launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    assert again.instance_id == inst.instance_id and len(aws.live_instances(owner)) == 1


def test_a_launch_whose_request_never_arrived_is_sent_again_once(
    make_provider, owner, aws, tmp_path
):
    p = make_provider(sleep=lambda s: None)
    calls = []

    def dropped(**kw):
        calls.append(1)
        if len(calls) == 1:
            raise bx.ConnectionClosedError(endpoint_url=aws.url)

    _on_run_instances(p, "before", dropped)
    key = new_key()
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    assert len(calls) == 2 and [i["InstanceId"] for i in aws.live_instances(owner)] == [
        inst.instance_id
    ]


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("InsufficientInstanceCapacity", NoCapacity),
        ("SpotMaxPriceTooLow", NoCapacity),
        ("VcpuLimitExceeded", QuotaExceeded),
        ("MaxSpotInstanceCountExceeded", QuotaExceeded),
    ],
)
def test_launch_errors_are_typed_and_leave_nothing_behind(
    make_provider, owner, aws, tmp_path, code, cls
):
    p = make_provider()

    def refuse(**kw):
        raise bx.ClientError({"Error": {"Code": code, "Message": "no"}}, "RunInstances")

    _on_run_instances(p, "before", refuse)
    key = new_key()
    with pytest.raises(cls, match=code):
        p.launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    assert aws.live_instances(owner) == [] and p.find(key) is None


def test_a_spot_notice_stops_the_job_then_the_reclaim_reads_as_preempted(
    make_provider, aws, imds, runner, tmp_path
):
    (tmp_path / "job.py").write_text(JOB)
    p = make_provider()
    key = new_key()
    offer = pick(p, spot=True)
    # the plan the controller builds: the spot machine's notice hook included
    plan = provider_plan(
        p, offer, tmp_path, key, "python job.py", checkpoints={"dir": "checkpoints"}
    )
    boot = Bootstrap(plan=plan, token="tok-" + uuid.uuid4().hex)
    inst = p.launch(offer, boot, key)
    st = wait_status(p, inst, {InstanceState.RUNNING})
    agent = httpx.Client(base_url=st.endpoint, headers={"Authorization": f"Bearer {boot.token}"})
    # the machine ran its user-data (the node bootstrap, then the boot module) in a root of
    # its own, and the job was shipped: it runs in the machine's own workdir
    fs = runner.root / inst.instance_id / "fs"
    work = fs / plan.workdir.lstrip("/")
    wait_until((work / "started").exists, 20, 0.1, "the job to start")
    assert (fs / "opt" / "corral" / "node-bootstrap.sh").is_file()
    assert (fs / "var" / "log" / "corral-bootstrap.log").is_file()
    assert not (fs / "opt" / "corral" / "bootstrap.b64").exists()  # the payload is gone
    imds.interrupt(inst.instance_id)
    st = p.status(inst)
    assert st.state == InstanceState.PREEMPTED and "marked-for-termination" in st.detail
    assert st.endpoint  # still running: the controller can watch the graceful stop
    wait_until(
        lambda: agent.get("/status").json()["phase"] == "stopped",
        20,
        0.1,
        "the agent to stop on the notice",
    )
    assert (work / "checkpoints" / "ckpt-on-notice").exists()
    aws.reclaim(inst.instance_id, runner=runner)
    st = p.status(inst)
    assert st.state == InstanceState.PREEMPTED and st.endpoint is None
    p.terminate(inst)  # already terminated by EC2: nothing to do
    assert p.status(inst).state.gone


def test_a_reclaim_without_notice_is_preempted_not_terminated(
    make_provider, owner, aws, runner, tmp_path
):
    p = make_provider()
    key = new_key()
    inst = p.launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    wait_status(p, inst, {InstanceState.RUNNING})
    aws.reclaim(inst.instance_id, runner=runner)
    st = p.status(inst)
    assert st.state == InstanceState.PREEMPTED and "EC2 reclaimed" in st.detail


def test_terminate_of_a_missing_instance_succeeds(make_provider, tmp_path):
    p = make_provider()
    key = new_key()
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    ghost = inst.model_copy(update={"instance_id": "i-0123456789abcdef0", "created_at": None})
    p.terminate(ghost)
    assert p.status(ghost).state == InstanceState.TERMINATED


def test_a_new_provider_finds_and_lists_instances_by_tag_scoped_to_its_owner(
    make_provider, tmp_path
):
    p = make_provider()
    key = new_key()
    inst = p.launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    fresh = make_provider()
    found = fresh.find(key)
    assert found is not None and found.instance_id == inst.instance_id
    assert found.offer.offer_id == inst.offer.offer_id and found.offer.spot
    assert found.data["run_id"] == key.rsplit("-a", 1)[0]
    assert [i.instance_id for i in fresh.list_instances()] == [inst.instance_id]
    assert make_provider(owner="someone-else").list_instances() == []


def test_leak_sweep_terminates_only_instances_whose_run_is_over(
    make_provider, owner, aws, tmp_path
):
    p = make_provider()
    keep, leak = new_key(), new_key()
    kept = p.launch(pick(p, spot=False), bootstrap(tmp_path, keep), keep)
    leaked = p.launch(pick(p, spot=False), bootstrap(tmp_path, leak), leak)
    assert p.sweep([keep]) == []  # too young: may be a launch in flight
    assert p.sweep([keep], min_age_s=0) == [leaked.instance_id]
    live = [i["InstanceId"] for i in aws.live_instances(owner)]
    assert live == [kept.instance_id]
    assert make_provider(owner="someone-else").sweep([], min_age_s=0) == []


KILLER = textwrap.dedent(
    """
    import os, signal, sys, uuid
    from corral.providers.aws.provider import AwsProvider
    from corral.providers.base import Bootstrap
    url, image, key, workdir, owner = sys.argv[1:6]
    p = AwsProvider(endpoint_url=url, environ={}, regions=["us-east-1"], image_id=image,
                    controller_cidr="203.0.113.7/32", owner=owner)
    def die(**kw):  # the controller dies right after EC2 created the instance
        os.kill(os.getpid(), signal.SIGKILL)
    p.ec2.client("us-east-1").meta.events.register("after-call.ec2.RunInstances", die)
    offer = next(o for o in p.offers(__import__("corral.providers.base").providers.base
                 .Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=1, spot=False)))
    plan = {"run_id": key.rsplit("-a", 1)[0], "attempt": 1, "workdir": workdir,
            "stages": [{"name": "train", "run": "sleep 60"}], "checkpoint_dir": workdir,
            "state_dir": workdir}
    p.launch(offer, Bootstrap(plan=plan, token="t"), key)
    print("not killed")
    """
)


def test_kill_between_create_and_record_the_instance_is_adopted_or_swept(
    make_provider, owner, aws, tmp_path
):
    key = new_key()
    env = {**os.environ, **aws.env()}
    done = subprocess.run(
        [sys.executable, "-c", KILLER, aws.url, aws.image_id(), key, str(tmp_path), owner],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stdout + done.stderr
    [created] = aws.live_instances(owner)
    p = make_provider()  # the restarted controller
    found = p.find(key)
    assert found is not None and found.instance_id == created["InstanceId"]
    adopted = p.launch(found.offer, bootstrap(tmp_path, key), key)
    assert adopted.instance_id == created["InstanceId"] and len(aws.live_instances(owner)) == 1
    assert p.sweep([], min_age_s=0) == [created["InstanceId"]]  # or: its run is over
    assert aws.live_instances(owner) == []


def test_offers_use_live_spot_prices_until_refresh(make_provider):
    p = make_provider()
    asked = []
    p.ec2.client("us-east-1").meta.events.register(
        "before-call.ec2.DescribeSpotPriceHistory", lambda **kw: asked.append(1)
    )
    offers = p.offers(A10G)
    spot = [o for o in offers if o.spot]
    assert spot and all(o.details["price_source"] == "describe_spot_price_history" for o in spot)
    assert {o.details["zone"] for o in spot} >= {"us-east-1a", "us-east-1b"}
    assert all(o.catalog_date == o.details["price_at"] for o in offers)
    p.offers(A10G)
    assert len(asked) == 1  # cached
    p.refresh()
    p.offers(A10G)
    assert len(asked) == 2
    with pytest.raises(InfeasibleRequest, match=r"^aws has no region 'ap-south-99' \(its catalog"):
        p.offers(A10G.model_copy(update={"regions": ["ap-south-99"]}))
    assert all(not o.spot for o in p.offers(A10G.model_copy(update={"spot": False})))


def test_the_controller_address_is_learned_once_with_a_user_agent(make_provider, aws, tmp_path):
    seen = []

    def checkip(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["User-Agent"])
        return httpx.Response(200, text="198.51.100.23\n")

    http = httpx.Client(transport=httpx.MockTransport(checkip))
    p = make_provider(controller_cidr=None, http=http)
    for _ in range(2):
        key = new_key()
        inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    assert len(seen) == 1 and seen[0].startswith("corral/")
    item = aws.instances(InstanceIds=[inst.instance_id])[0]
    group = aws.client().describe_security_groups(GroupIds=[item["SecurityGroups"][0]["GroupId"]])
    [rule] = group["SecurityGroups"][0]["IpPermissions"]
    assert rule["IpRanges"][0]["CidrIp"] == "198.51.100.23/32"
    broken = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
    p = make_provider(controller_cidr=None, http=broken)
    with pytest.raises(ProviderUnavailable, match="CORRAL_AWS_CONTROLLER_CIDR"):
        p.launch(pick(p, spot=False), bootstrap(tmp_path, "k1-a1"), "k1-a1")


def test_the_ami_comes_from_an_ssm_parameter_per_region(make_provider, aws, tmp_path):
    aws.client("ssm").put_parameter(Name="/corral/test/ami", Value=aws.image_id(), Type="String")
    p = make_provider(image_id=None, image_parameter="/corral/test/ami")
    key = new_key()
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    assert aws.instances(InstanceIds=[inst.instance_id])[0]["ImageId"] == aws.image_id()
    p = make_provider(image_id=None, image_parameter="/corral/test/missing")
    with pytest.raises(ProviderError, match="set CORRAL_AWS_IMAGE_ID"):
        p.launch(pick(p, spot=False), bootstrap(tmp_path, "k2-a1"), "k2-a1")


def test_without_the_ssm_parameter_the_newest_amazon_ami_of_that_name_is_used(
    make_provider, aws, tmp_path
):
    ec2 = aws.client("ec2")
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    named = [i for i in images if "ubuntu" in (i.get("Name") or "").lower()]
    newest = max(named, key=lambda i: str(i.get("CreationDate") or ""))
    p = make_provider(image_id=None, image_parameter="/corral/test/none", image_name="*ubuntu*")
    key = new_key()
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    assert aws.instances(InstanceIds=[inst.instance_id])[0]["ImageId"] == newest["ImageId"]


def test_a_data_volume_outlives_the_instance_and_is_released_with_the_run(
    make_provider, aws, tmp_path
):
    p = make_provider(data_volume_gb=50)
    run = "rvol" + uuid.uuid4().hex[:6]
    offer = pick(p, spot=False)
    assert p.node_profile(offer, run).checkpoint_dir == f"/mnt/corral-data/{run}/checkpoints"
    first = p.launch(offer, bootstrap(tmp_path, f"{run}-a1"), f"{run}-a1")
    [vol] = p.volumes(run)
    assert vol["Size"] == 50 and vol["Encrypted"]
    assert first.data["zone"] == vol["AvailabilityZone"]
    wait_status(p, first, {InstanceState.RUNNING})
    [vol] = p.volumes(run)
    assert [a["InstanceId"] for a in vol["Attachments"]] == [first.instance_id]
    wait_until(lambda: _gone_or_terminate(p, first), 30, 0.05, "the first instance to go")
    second = p.launch(pick(p, spot=False), bootstrap(tmp_path, f"{run}-a2"), f"{run}-a2")
    assert [v["VolumeId"] for v in p.volumes(run)] == [vol["VolumeId"]]  # the same disk
    assert second.data["zone"] == vol["AvailabilityZone"]
    assert p.sweep_volumes([run]) == []
    wait_status(p, second, {InstanceState.RUNNING})
    p.sweep([], min_age_s=0)
    assert p.release_volumes(run) == [vol["VolumeId"]]
    assert p.volumes(run) == []


def test_the_leak_sweep_deletes_the_data_volumes_of_runs_that_are_over(make_provider, tmp_path):
    p = make_provider(data_volume_gb=20)
    run = "rleak" + uuid.uuid4().hex[:6]
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, f"{run}-a1"), f"{run}-a1")
    [vol] = p.volumes(run)
    wait_until(lambda: _gone_or_terminate(p, inst), 30, 0.05, "the instance to go")
    wait_until(lambda: [v["State"] for v in p.volumes(run)] == ["available"], 30, 0.1, "detached")
    # without the runs' states (an old caller) volumes are left alone; an active run keeps
    # its volume between attempts; a young volume may be a launch the sweep did not see yet
    assert p.sweep([], min_age_s=0) == []
    assert p.sweep([], [run], min_age_s=0) == []
    assert p.sweep([], [], min_age_s=3600) == []
    assert p.volumes(run) != []
    # the run is over and nobody released its volume: the controller's leak sweep does
    assert p.sweep([], ["some-other-run"], min_age_s=0) == [vol["VolumeId"]]
    assert p.volumes(run) == []


def _gone_or_terminate(p: AwsProvider, inst) -> bool:
    """Terminate ``inst``: True once it is gone, False while EC2 is still shutting it down (any
    other error fails the test at once)."""
    try:
        p.terminate(inst)
    except NotYetTerminated:
        return False
    return True


def test_no_credential_token_or_job_secret_reaches_logs_or_errors(
    make_provider, aws, tmp_path, caplog
):
    caplog.set_level("DEBUG", logger="corral")
    p = make_provider()
    key = new_key()
    boot = bootstrap(tmp_path, key, HF_TOKEN="hf-job-secret-42")
    inst = p.launch(pick(p, spot=True), boot, key)
    wait_status(p, inst, {InstanceState.RUNNING})
    messages = []

    def refuse(**kw):
        raise bx.ClientError(
            {"Error": {"Code": "AuthFailure", "Message": f"key {ACCESS_KEY} was refused"}},
            "RunInstances",
        )

    _on_run_instances(p, "before", refuse)
    with pytest.raises(ProviderError) as err:
        p.launch(pick(p, spot=True), bootstrap(tmp_path, "k3-a1"), "k3-a1")
    messages.append(json.dumps(err.value.to_dict()))
    p.sweep([], min_age_s=0)
    text = caplog.text + "".join(messages)
    for secret in (SECRET_KEY, ACCESS_KEY, boot.token, "hf-job-secret-42"):
        assert secret not in text


def test_console_logs_come_from_ec2(make_provider, tmp_path):
    p = make_provider()
    key = new_key()
    inst = p.launch(pick(p, spot=False), bootstrap(tmp_path, key), key)
    out = p.logs(inst, tail=3)
    assert out and len(out.splitlines()) <= 3


def test_without_credentials_aws_offers_nothing_and_says_why(aws, monkeypatch):
    import boto3

    from corral.errors import AuthFailed

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    session = boto3.Session(region_name="us-east-1")
    p = AwsProvider(session, endpoint_url=aws.url, environ={}, controller_cidr="203.0.113.7/32")
    with pytest.raises(AuthFailed, match="no usable AWS credentials"):
        p.offers(A10G)


def test_the_registry_builds_aws_from_the_environment(aws, imds, owner, monkeypatch):
    from corral.errors import BadInput
    from corral.providers.registry import ENV_PROVIDER_PLUGINS, get_provider
    from corral.testing.aws import ENV_TEST_IMDS, LocalAwsProvider, LocalMachineRunner

    for name, value in {
        **aws.env(),
        "CORRAL_AWS_REGIONS": "us-east-1, us-west-2",
        "CORRAL_AWS_IMAGE_ID": aws.image_id(),
        "CORRAL_AWS_AGENT_PORT": "7999",
        "CORRAL_AWS_OWNER": owner,
    }.items():
        monkeypatch.setenv(name, value)
    assert get_provider("aws").runner is None  # the real provider plays no machines
    # a test registers the test double in its place, as a third-party provider would be
    monkeypatch.setenv(ENV_PROVIDER_PLUGINS, "aws=corral.testing.aws:LocalAwsProvider")
    monkeypatch.setenv(ENV_TEST_IMDS, imds.url)
    p = get_provider("aws")
    assert isinstance(p, LocalAwsProvider) and isinstance(p.runner, LocalMachineRunner)
    assert p.runner.imds_url == imds.url
    assert p.regions == ["us-east-1", "us-west-2"] and p.settings.agent_port == 7999
    assert {o.region for o in p.offers(A10G.model_copy(update={"spot": False}))} == {
        "us-east-1",
        "us-west-2",
    }
    monkeypatch.setenv("CORRAL_AWS_DATA_VOLUME_GB", "lots")
    with pytest.raises(BadInput, match="CORRAL_AWS_DATA_VOLUME_GB"):
        get_provider("aws")


def test_every_ec2_request_carries_corrals_user_agent(make_provider, tmp_path):
    p = make_provider()
    agents = []
    p.ec2.client("us-east-1").meta.events.register(
        "before-send.ec2", lambda request, **kw: agents.append(request.headers["User-Agent"])
    )
    key = new_key()
    p.launch(pick(p, spot=True), bootstrap(tmp_path, key), key)
    text = [a.decode() if isinstance(a, bytes) else a for a in agents]
    assert text and all("corral/" in a for a in text)
