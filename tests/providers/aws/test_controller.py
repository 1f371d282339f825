"""A run on the fake AWS under a real controller process: launched on a spot instance, warned
by the instance metadata service, stopped gracefully with a checkpoint, recovered on another
spot pool, finished, and torn down with no instance left."""

from __future__ import annotations

import os
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

# Counts to TOTAL, one step per 0.1 s, saving its step after each; on SIGTERM it saves and
# exits 75 ("preempted"), like a job using the SDK; on start it resumes from the saved step.
JOB = """
import os, signal, sys, time
ckpt = os.path.join(os.environ["CORRAL_CHECKPOINT_DIR"], "step")
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
with open("attempts.txt", "a") as f:
    f.write(f"{os.environ['CORRAL_ATTEMPT']} from {step}\\n")
def save():
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
def stop(signum, frame):
    save()
    sys.exit(75)
signal.signal(signal.SIGTERM, stop)
while step < 30:
    time.sleep(0.1)
    step += 1
    save()
    if step == 1:
        open("saved-once", "w").close()
"""


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
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    spec = write_spec(
        work,
        f"""
        name: on-aws
        resources: {{gpus: "A10G:1", spot: true, providers: [aws]}}
        recovery: {{max_preemption_restarts: 2, strategy: next-cheapest}}
        stages:
          - name: train
            run: {sys.executable} job.py
        """,
    )
    run_id = submit(spec)
    store = Store.open()
    proc = start_controller(tick=0.2)
    try:
        wait_for(store, run_id, {"RUNNING"}, timeout=60)
        first = store.attempts(run_id)[0]
        # the job runs and has saved a step: a notice before that would resume from 0
        wait_until((work / "saved-once").exists, 30, message="the job to save a step")
        imds.interrupt(first.instance_id)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED", "STOPPED", "CANCELLED"}, timeout=90)
        assert run.state == "SUCCEEDED", run.reason
        attempts = store.attempts(run_id)
        assert [a.exit_reason for a in attempts] == ["preempted", "succeeded"]
        first, second = attempts
        assert first.offer["details"]["machine"] != second.offer["details"]["machine"]
        lines = (work / "attempts.txt").read_text().splitlines()
        assert lines[0] == "1 from 0" and lines[1].startswith("2 from ")
        assert int(lines[1].split()[-1]) > 0  # resumed from the checkpoint of the notice
        wait_for(store, run_id, {"SUCCEEDED"})
        assert store.resources(run_id=run_id, open_only=True) == []
        assert aws.live_instances(owner) == []
    finally:
        proc.terminate()
        proc.wait(10)
        LocalMachineRunner(Path(os.environ["CORRAL_HOME"])).stop_all()
