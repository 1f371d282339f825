"""A machine that cannot boot says why, once: the attempt ends with that reason in `corral
status` within the boot (not at the provision timeout), and nothing relaunches the same
failure. On the fake cloud a machine's "python" here is the real node bootstrap on an image
with no python and no runtime shipped (it says so and exits 78 before any agent serves); the
agent's own refusals before the setup (an image that cannot be pulled) end with 78 too."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from corral.control import recovery
from corral.control.context import Context, Settings
from corral.control.controller import Controller
from corral.providers.fake import FakeProvider
from corral.spec import JobSpec
from corral.store import Store
from corral.wire.env import EXIT_CANNOT_BOOT
from corral.wire.outcome import OutcomeKind, from_agent
from corral.wire.status import AgentStatus, Phase
from support import cannot_boot

from .helpers import submit, tick_until, write_spec

OFFER = {
    "id": "box",
    "region": "r1",
    "gpu_type": "L40S",
    "gpu_count": 1,
    "spot_price": 0.3,
    "on_demand_price": 0.9,
    "capacity": 4,
}


def _image_without_python(tmp: Path, env: dict[str, str]) -> Path:
    """What the fake machine runs as its "python": the real node bootstrap, with a PATH of a
    shell and basic tools only (an image without python, curl, wget or package manager),
    given the agent's arguments."""
    python = tmp / "python"
    argv = cannot_boot.bootstrap_argv(tmp, env)
    python.write_text("#!/bin/bash\nexec " + shlex.join(argv) + ' "$@"\n')
    python.chmod(0o755)
    return python


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, cannot_boot.NO_PYTHON),  # and no runtime shipped
        (cannot_boot.RUNTIME_OVER_HTTPS, cannot_boot.NO_FETCH),  # nothing to fetch it with
    ],
    ids=["no-python-no-runtime", "no-curl-wget-python-or-package-manager"],
)
def test_a_fake_machine_that_cannot_boot_fails_its_run_with_why_and_once(
    tmp_path: Path, corral_home: Path, env: dict[str, str], said: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('never runs')\n")
    spec = write_spec(
        work,
        """
        name: no-python
        run: python train.py
        resources: {gpus: "L40S:1", spot: false, providers: [fake]}
        recovery: {max_error_restarts: 3}
        """,
    )
    run_id = submit(spec)
    cloud = {"offers": [OFFER], "launch_delay_s": 0.0}
    provider = FakeProvider(
        cloud, home=corral_home, python=str(_image_without_python(tmp_path, env))
    )
    store = Store.open()
    settings = Settings(provision_timeout_s=600, boot_log_check_s=0.2)
    controller = Controller(Context(store=store, providers={"fake": provider}, settings=settings))
    began = time.monotonic()
    run = tick_until(controller, store, run_id, lambda r: r.terminal, timeout=60)
    assert time.monotonic() - began < 60  # the boot's time, far from the provision timeout
    assert run.state == "FAILED"
    assert run.reason == f"the machine cannot boot corral: {said}"
    assert [a.number for a in store.attempts(run_id)] == [1]  # not relaunched
    kept = (corral_home / "runs" / run_id / "machine" / "a1.log").read_text()
    assert kept.count(said) == 1


def test_an_agent_that_cannot_run_the_image_is_not_recovered() -> None:
    status = AgentStatus.model_validate(
        {
            "phase": "failed",
            "reason": "image 'ghcr.io/me/x:1' could not be pulled: access denied",
            "exit_code": EXIT_CANNOT_BOOT,
            "failed_stage": None,
            "stages": [],
            "run_id": "r",
            "attempt": 1,
        }
    )
    assert status.phase == Phase.FAILED
    outcome = from_agent(status)
    assert outcome.kind == OutcomeKind.FAILED and outcome.cannot_boot
    assert outcome.reason == "image 'ghcr.io/me/x:1' could not be pulled: access denied"
    spec = JobSpec.model_validate(
        {"name": "x", "run": "true", "recovery": {"max_error_restarts": 5}}
    )
    decision = recovery.decide(spec, [], 1, outcome.kind, outcome.exit_code, cannot_boot=True)
    assert not decision.recover
    # a stage of the job's own that exits 78 is the job's failure, recovered as any other
    stage = status.model_copy(update={"failed_stage": "train"})
    assert not from_agent(stage).cannot_boot
    again = recovery.decide(spec, [], 1, OutcomeKind.FAILED, EXIT_CANNOT_BOOT)
    assert again.recover


def test_a_machine_that_boots_in_time_never_waits_for_its_log(
    tmp_path: Path, corral_home: Path
) -> None:
    """A log stream may take seconds to read: the booting machine's log is read first
    boot_log_check_s into its boot, so a machine that boots sooner is not held up by it."""
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(
        work,
        """
        name: quick
        run: echo done
        resources: {gpus: "L40S:1", spot: false, providers: [fake]}
        """,
    )
    run_id = submit(spec)
    reads: list[str] = []

    class Counting(FakeProvider):
        def logs(self, instance, tail: int = 200) -> str:  # type: ignore[no-untyped-def]
            reads.append(instance.key)
            return super().logs(instance, tail)

    provider = Counting({"offers": [OFFER], "launch_delay_s": 0.0}, home=corral_home)
    store = Store.open()
    settings = Settings(boot_log_check_s=30)
    controller = Controller(Context(store=store, providers={"fake": provider}, settings=settings))
    run = tick_until(controller, store, run_id, lambda r: r.terminal, timeout=60)
    assert run.state == "SUCCEEDED", run.reason
    assert reads == []
