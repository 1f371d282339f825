"""Every AWS call corral makes goes through a boto3 client that validates its parameters
against botocore's service model, and the calls every AWS provider method makes are recorded
and validated again here (botocore's ``ParamValidator`` against the operation's input shape),
whatever a client's own settings: a request AWS would refuse as malformed fails a test, not
a first real launch."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.validate import ParamValidator

from corral.providers.aws.client import _config
from corral.providers.base import InstanceState, Requirements, VolumeRequest
from corral.storage.s3_client import S3Settings, make_client

from ..contract import new_key
from .harness import ACCESS_KEY, SECRET_KEY
from .test_provider import bootstrap, gang_bootstrap

SRC = Path(__file__).resolve().parents[3] / "src" / "corral"
A10G = Requirements(gpu_type="A10G", gpu_count_min=1, gpu_count_max=1)


class Recorder:
    """Every call of every client of a boto3 session, each checked against the model."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.violations: list[str] = []

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        self.calls.append((service, model.name))
        report = ParamValidator().validate(params, model.input_shape)
        if report.has_errors():
            self.violations.append(f"{service}.{model.name}: {report.generate_report()}")

    def session(self) -> Any:
        session = boto3.Session(
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name="us-east-1"
        )
        session.events.register("provide-client-params", self)
        return session

    def ops(self) -> set[str]:
        return {f"{s}.{op}" for s, op in self.calls}


class PlayedMachines:
    """A machine runner that boots nothing: EC2's side of every call is what is exercised."""

    def __init__(self) -> None:
        self.user_data: dict[str, str] = {}

    def boot(self, instance_id: str, instance_type: str, user_data: str) -> None:
        self.user_data[instance_id] = user_data

    def booted(self, instance_id: str) -> bool:
        return instance_id in self.user_data

    def endpoint(self, instance_id: str) -> str | None:
        return "http://127.0.0.1:9" if self.booted(instance_id) else None

    def spot_status(self, instance_id: str) -> str | None:
        return None

    def stop(self, instance_id: str) -> None:
        pass

    def console(self, instance_id: str) -> str | None:
        return None  # EC2's console output


def test_no_corral_aws_client_turns_parameter_validation_off(make_provider, tmp_path):
    assert _config().parameter_validation is True
    p = make_provider(machine_runner=PlayedMachines())
    key = new_key()
    p.launch(next(o for o in p.offers(A10G) if o.spot), bootstrap(tmp_path, key), key)
    clients = dict(p.ec2._clients)
    assert {service for service, _ in clients} >= {"ec2", "pricing"}
    for (service, region), client in clients.items():
        assert client.meta.config.parameter_validation is True, (service, region)
    # credentials given: a client without any would look for them at the instance metadata
    # service, past loopback
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    s3 = make_client(S3Settings(endpoint_url="http://127.0.0.1:9"), environ=creds)
    assert s3.meta.config.parameter_validation is True
    # nor does any corral code anywhere turn it off
    off = re.compile(r"parameter_validation\W{1,4}(False|0)\b")
    found = [str(f) for f in SRC.rglob("*.py") if off.search(f.read_text())]
    assert found == []


def test_every_provider_method_sends_only_requests_botocore_validates(make_provider, aws, tmp_path):
    rec = Recorder()
    aws.client("ssm").put_parameter(
        Name="/corral/test/validated-ami", Value=aws.image_id(), Type="String", Overwrite=True
    )
    machines = PlayedMachines()
    p = make_provider(
        session=rec.session(),
        machine_runner=machines,
        image_id=None,
        image_parameter="/corral/test/validated-ami",
        data_volume_gb=10,
        # a security group of its own: the gang's rule is not the single-node tests' business
        controller_cidr="192.0.2.77/32",
    )
    mount = tmp_path / "mnt" / "data"
    needs = A10G.model_copy(
        update={
            "volumes": [VolumeRequest(name="v" + uuid.uuid4().hex[:6], size_gb=5, mount=str(mount))]
        }
    )
    # offers: spot and on-demand, live prices, named volumes looked up
    offers = p.offers(needs)
    spot = next(o for o in offers if o.spot)
    on_demand = next(o for o in offers if not o.spot and o.details["instance_type"] == "g5.xlarge")
    # launch both kinds; status boots and attaches; logs; find; list; sweep; terminate
    launched = []
    for offer in (spot, on_demand):
        key = new_key()
        launched.append(p.launch(offer, bootstrap(tmp_path, key), key))
    for inst in launched:
        assert p.status(inst).state in (InstanceState.RUNNING, InstanceState.PROVISIONING)
        p.logs(inst, tail=5)
        assert p.find(inst.key) is not None
    # a gang of two (no named volumes: one EBS volume, one instance): the placement group,
    # the zone of its head, the run's security group, a data volume per node
    plain = next(
        o for o in p.offers(A10G) if not o.spot and o.details["instance_type"] == "g5.xlarge"
    )
    head_key = new_key()
    head = p.launch(plain, gang_bootstrap(tmp_path, head_key, 0), head_key)
    member_key = f"{head_key}-k1"
    member = p.launch(
        plain, gang_bootstrap(tmp_path, member_key, 1, p.gang_address(head)), member_key
    )
    gang_run = head.data["run_id"]
    launched += [head, member]
    assert {i.instance_id for i in p.list_instances()} >= {i.instance_id for i in launched}
    assert p.list_volumes()
    p.refresh_prices()
    p.offers(A10G.model_copy(update={"spot": False}))
    for inst in launched:
        while True:
            try:
                p.terminate(inst)
                break
            except Exception:
                continue
    p.sweep([], [], min_age_s=0)
    p.release_run(launched[0].data["run_id"])
    p.release_run(gang_run)
    for v in p.list_volumes():
        if v.state == "available":
            p.remove_volume(v.name)

    assert rec.violations == []
    assert rec.ops() >= {
        "pricing.GetProducts",
        "ec2.DescribeSpotPriceHistory",
        "ssm.GetParameter",
        "ec2.DescribeImages",
        "ec2.DescribeVpcs",
        "ec2.DescribeSecurityGroups",
        "ec2.AuthorizeSecurityGroupIngress",
        "ec2.CreateVolume",
        "ec2.DescribeVolumes",
        "ec2.RunInstances",
        "ec2.DescribeInstances",
        "ec2.DescribeInstanceAttribute",
        "ec2.AttachVolume",
        "ec2.GetConsoleOutput",
        "ec2.TerminateInstances",
        "ec2.DeleteVolume",
        "ec2.DescribeInstanceTypes",
        "ec2.CreatePlacementGroup",
        "ec2.DescribePlacementGroups",
        "ec2.DeletePlacementGroup",
        "ec2.CreateSecurityGroup",
        "ec2.DeleteSecurityGroup",
    }, sorted(rec.ops())


@pytest.mark.parametrize(
    "service, op, params",
    [
        ("ec2", "RunInstances", {"MinCount": 1, "MaxCount": 1, "InstanceType": 7}),
        ("pricing", "GetProducts", {"ServiceCode": "AmazonEC2", "MaxResults": 0}),
        ("ec2", "DescribeInstances", {"Filters": [{"Name": "tag:x", "Value": ["y"]}]}),
    ],
)
def test_the_recorder_catches_what_aws_would_refuse(service, op, params):
    rec = Recorder()
    # the service's model from botocore's own data (no client: no credentials looked up)
    model = botocore.session.get_session().get_service_model(service)
    rec(params, model.operation_model(op))
    assert len(rec.violations) == 1 and rec.violations[0].startswith(f"{service}.{op}: ")
