"""A run on the fake AWS under a real controller process: launched on a spot instance, warned
by the instance metadata service, stopped gracefully with a checkpoint, recovered on another
spot pool, finished, and torn down with no instance left."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from control.helpers import start_controller, submit, wait_for, write_spec
from corral.providers.registry import ENV_PROVIDER_PLUGINS
from corral.store import Store
from corral.testing.aws import ENV_TEST_IMDS, LocalMachineRunner
from support.waiting import wait_until

from .fake_imds import FakeImds
from .harness import MotoAws

pytestmark = pytest.mark.slow

TRAINER = Path(__file__).parents[2] / "e2e" / "trainer.py"


def test_a_spot_notice_on_aws_is_recovered_elsewhere_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: MotoAws, imds: FakeImds, owner: str
) -> None:
    for name, value in {
        **aws.env(),
        "CORRAL_PROVIDERS": "aws",
        "CORRAL_AWS_REGIONS": "us-east-1",
        "CORRAL_AWS_IMAGE_ID": aws.image_id(),
        "CORRAL_AWS_CONTROLLER_CIDR": "203.0.113.7/32",
        "CORRAL_AWS_OWNER": owner,
        # the controller (a background process) builds the test double in the real one's place
        ENV_PROVIDER_PLUGINS: "aws=corral.testing.aws:LocalAwsProvider",
        ENV_TEST_IMDS: imds.url,
    }.items():
        monkeypatch.setenv(name, value)
    # the instances share no file with this machine: the job is shipped, its checkpoints go
    # to S3 (moto's, reached with the instance profile's credentials)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(TRAINER, work / "trainer.py")
    bucket = "ckpt-" + owner
    aws.client("s3").create_bucket(Bucket=bucket)
    spec = write_spec(
        work,
        f"""
        name: on-aws
        resources: {{gpus: "A10G:1", spot: true, providers: [aws]}}
        recovery: {{max_preemption_restarts: 2, strategy: next-cheapest}}
        checkpoints: {{storage: "s3://{bucket}/runs"}}
        stages:
          - name: train
            run: {sys.executable} trainer.py --total 30 --step-seconds 0.1 --every 2
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller(tick=0.2)
    try:
        wait_for(store, run_id, {"RUNNING"}, timeout=60)
        first = store.attempts(run_id)[0]
        # the job runs and has a checkpoint in S3: a notice before that would resume from 0
        wait_until(
            lambda: store.events(run_id, types=["checkpoint.uploaded"]),
            30,
            message="the job's first checkpoint in S3",
        )
        imds.interrupt(first.instance_id)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}, timeout=90)
        assert run.state == "SUCCEEDED", run.reason
        attempts = store.attempts(run_id)
        assert [a.exit_reason for a in attempts] == ["preempted", "succeeded"]
        first, second = attempts
        assert first.offer["details"]["machine"] != second.offer["details"]["machine"]
        logs = Path(os.environ["CORRAL_HOME"]) / "runs" / run_id / "logs"
        first_log = (logs / "a1" / "train.log").read_text()
        second_log = (logs / "a2" / "train.log").read_text()
        assert "trainer: attempt 1" in first_log and "resumed" not in first_log
        resumed = re.search(r"trainer: resumed at step (\d+)", second_log)
        assert resumed and int(resumed.group(1)) > 0  # from the checkpoint of the notice
        assert "trainer: done at step 30" in second_log
        wait_for(store, run_id, {"SUCCEEDED"})
        assert store.resources(run_id=run_id, open_only=True) == []
        assert aws.live_instances(owner) == []
    finally:
        proc.terminate()
        proc.wait(10)
        LocalMachineRunner(Path(os.environ["CORRAL_HOME"])).stop_all()
