"""The quickstart on (moto's) AWS, from shipped code only: the instances' agents run under
roots of their own (corral.testing.aws) and never see the controller's workdir or home; the
code and the checkpoints travel through S3; a spot notice from the metadata service preempts
the first instance (see tests/e2e/shipped.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.providers.registry import ENV_PROVIDER_PLUGINS
from corral.store import Store
from corral.testing.aws import ENV_TEST_IMDS, LocalMachineRunner
from providers.aws.fake_imds import FakeImds
from providers.aws.harness import MotoAws

from .shipped import (
    check_finished_like_uninterrupted,
    copy_quickstart,
    reference_weights,
    run_preempted,
)

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_quickstart_ships_to_ec2_is_preempted_and_resumes_without_resending_its_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    corral_home: Path,
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    aws, imds = MotoAws(), FakeImds()
    owner = "t-" + tmp_path.name[-12:].replace("_", "-")
    try:
        for name, value in {
            **aws.env(),
            "CORRAL_PROVIDERS": "aws",
            "CORRAL_AWS_REGIONS": "us-east-1",
            "CORRAL_AWS_IMAGE_ID": aws.image_id(),
            "CORRAL_AWS_CONTROLLER_CIDR": "203.0.113.7/32",
            "CORRAL_AWS_OWNER": owner,
            ENV_PROVIDER_PLUGINS: "aws=corral.testing.aws:LocalAwsProvider",
            ENV_TEST_IMDS: imds.url,
        }.items():
            monkeypatch.setenv(name, value)
        s3 = aws.client("s3")
        bucket = "quickstart-" + owner.lower()
        s3.create_bucket(Bucket=bucket)
        expected = reference_weights(tmp_path_factory)

        def preempt(run_id: str) -> None:
            first = Store.open().attempts(run_id)[0]
            imds.interrupt(first.instance_id)

        run = run_preempted(
            copy_quickstart(tmp_path),
            f"s3://{bucket}/runs",
            preempt,
            set_=["resources.spot=true", "recovery.strategy=next-cheapest"],
        )

        def read(rel: str) -> bytes:
            return s3.get_object(Bucket=bucket, Key=f"runs/{rel}")["Body"].read()

        check_finished_like_uninterrupted(run, read, expected)
        assert aws.live_instances(owner) == []
    finally:
        LocalMachineRunner(corral_home).stop_all()
        imds.close()
        aws.close()
